#!/usr/bin/env bash
# Packs Nsight Systems' CLI (Debian non-free's nsight-systems 2023.4.4) into .nsys/ for a GPU machine without network.
# There: tar xJf .nsys/nsys-*-bundle.tar.xz -C /tmp/nsys && export PATH=/tmp/nsys/target-linux-x64:$PATH
# nsys finds its report importer in the sibling host-linux-x64/, as in NVIDIA's own layout.
set -euo pipefail
version="2023.4.4.54~12.4.1-2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
apt_options=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache")
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/x" "$work/h" "$work/out"
echo "deb http://deb.debian.org/debian trixie non-free" >"$work/sources.list"
apt-get "${apt_options[@]}" update -qq
(cd "$work/debs" && apt-get "${apt_options[@]}" download "nsight-systems-target=$version" "nsight-systems=$version")
dpkg -x "$work"/debs/nsight-systems-target_*.deb "$work/x"
dpkg -x "$work"/debs/nsight-systems_*.deb "$work/h"

target="$work/out/target-linux-x64"
cp -a "$work/x/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$target"
rm -rf "$target"/libcupti.so.10.* "$target"/libcupti.so.11.* "$target/CollectX" "$target/vulkan-layers"

host_src="$work/h/usr/lib/nsight-systems/host-linux-x64"
host="$work/out/host-linux-x64"
mkdir -p "$host"
cp "$host_src/QdstrmImporter" "$host/"
for lib in $(ldd "$host_src/QdstrmImporter" | awk '/host-linux-x64/ {print $3}' | sort -u); do cp -L "$lib" "$host/"; done
# The importer links libssh.so and libpfm.so.4, which a bare GPU machine lacks: take this machine's (apt: libssh-4 libpfm4).
libdir=/usr/lib/x86_64-linux-gnu
cp -L "$libdir/libssh.so.4" "$host/libssh.so"
cp -L "$libdir/libpfm.so.4" "$host/"
for lib in libcrypto.so.3 libgssapi_krb5.so.2 libkrb5.so.3 libk5crypto.so.3 libcom_err.so.2 libkrb5support.so.0 libkeyutils.so.1; do
  cp -L "$libdir/$lib" "$host/"
done

mkdir -p .nsys
tar cJf ".nsys/nsys-${version%%~*}-bundle.tar.xz" -C "$work/out" target-linux-x64 host-linux-x64
ls -la .nsys
