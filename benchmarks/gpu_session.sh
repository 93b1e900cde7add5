#!/usr/bin/env bash
# The GPU proofs of issues 2-4 in a few device calls (each part stays well under the 10-minute limit).
# Run on the GPU machine from the project root, with .whl carried (see benchmarks/README.md, How to rerun):
#   bash benchmarks/gpu_session.sh PART [ARGS]   # PART: sampling | overhead | hook | hookcpu | advisor | ladder | open
#                                                 | open1 | x2 | x2open | screen | proof24 | final24 | final26
#                                                 | screen26 | start | sweep | where26
#                                                 | screen26c | diag26 | screen26d | screen26e | confirm26
#                                                 | pcie26 | tune35 | heldout35 | heldout2 | records35 | live37 | flood36 | flood36all | nvlink38
# ARGS, where given, replace the default arguments of the part's main benchmark (overhead, hookcpu).
# Results land in $OUT (or ./gpu-results) with the device and date in each file; the device tool brings back only a
# few files, so pack them: OUT=/tmp/res bash benchmarks/gpu_session.sh PART; tar czf "$OUT/PART.tgz" -C /tmp/res .
set -uo pipefail
part=${1:?usage: gpu_session.sh sampling|overhead|hook|hookcpu|advisor|ladder|open|open1|x2|x2open|screen|proof24|final24|final26|screen26|start|sweep|where26|screen26c|diag26|screen26d|screen26e|confirm26|pcie26|tune35|heldout35|heldout2|records35|live37|flood36|flood36all|nvlink38 [ARGS]}
shift
out=${OUT:-gpu-results}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD:$PWD/demo PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
true  # demo/gpumon_demo/ is importable from the working tree (PYTHONPATH=$PWD/demo)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
date -u +%F >> "$out/device.txt"
case "$part" in
  sampling)  # sampler vs nvidia-smi/NVML, hook adds no sync, attach on a CUDA job (about 2 min)
    timeout 400 python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.log" ;;
  overhead)  # gpumon vs nvitop CPU cost at 1 s and 0.25 s (about 6 min with the default arguments)
    [ $# -gt 0 ] || set -- --rounds 3 --window 20
    timeout 570 python3 benchmarks/monitor_overhead.py "$@" --json "$out/monitor_overhead.json" 2>&1 \
      | tee "$out/monitor_overhead.log" ;;
  hookcpu)   # the hook's A/B on the machine's CPU: one process per variant, then off/on inside one process (about 8 min)
    [ $# -gt 0 ] || set -- --rounds 10
    timeout 330 python3 benchmarks/hook_overhead.py --device cpu "$@" --json "$out/hook_overhead_cpu.json" 2>&1 \
      | tee "$out/hook_overhead_cpu.log"
    timeout 200 python3 benchmarks/hook_overhead.py --device cpu --in-process "$@" \
      --json "$out/hook_overhead_cpu_inprocess.json" 2>&1 | tee "$out/hook_overhead_cpu_inprocess.log" ;;
  hook)      # hook overhead A/B on CUDA, attach latency, py-spy on a CUDA job, sampler tick cost (about 9 min)
    timeout 100 python3 -m pytest tests/gpu/test_attach_gpu.py -q -p no:cacheprovider 2>&1 | tee "$out/attach-tests.log"
    timeout 60 python3 benchmarks/sampler_tick_cost.py --load 2>&1 | tee "$out/sampler_tick_cost.log"
    timeout 20 python3 benchmarks/hook_overhead.py --micro 2>&1 | tee "$out/hook_micro.log"
    timeout 300 python3 benchmarks/hook_overhead.py --rounds 8 --json "$out/hook_overhead.json" 2>&1 | tee "$out/hook_overhead.log"
    timeout 60 python3 benchmarks/attach_latency.py --runs 5 2>&1 | tee "$out/attach_latency.log" ;;
  advisor)   # one job per bottleneck category under `gpumon diagnose`, then the hook's overhead A/B (about 9 min)
    timeout 230 python3 benchmarks/advisor_categories.py --duration 15 --warmup 5 --out "$out" 2>&1 \
      | tee "$out/advisor_categories.log"
    timeout 300 python3 benchmarks/hook_overhead.py --rounds 8 --steps 700 --json "$out/hook_overhead.json" 2>&1 \
      | tee "$out/hook_overhead.log" ;;
  ladder)    # the demo's guided ladder (gpumon demo --guided: live knobs on the running trial, adaptive windows; about 3 min)
    timeout 560 python3 benchmarks/advisor_categories.py --ladder --ladder-duration 15 --ladder-warmup 5 --out "$out" \
      2>&1 | tee "$out/ladder.log" ;;
  x2)        # on nvidia-h200-x2 or nvidia-h100-x2 (carry .deb/ with the prometheus package too): 2-GPU recording, NVLink/ECC/energy, DDP NCCL
             # ranks with the straggler and comm_bound, multi-node torchrun scraped by Prometheus (scrape sample kept),
             # nn.DataParallel's imbalance (about 8 min)
    if ls .deb/prometheus_*.deb >/dev/null 2>&1; then dpkg -x .deb/prometheus_*.deb /tmp/prom; export PATH=/tmp/prom/usr/bin:$PATH; fi
    chip=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H[0-9]+' | head -1 | tr 'H' 'h')
    python3 -m gpumon record "$out/${chip:-gpu}x2-tests.jsonl" --duration 150 \
      --note "2 x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F): gpumon's 2-GPU tests" \
      > "$out/record.log" 2>&1 &
    GPUMON_RECORD_PROMETHEUS="$out/prom" timeout 280 python3 -m pytest -v -rs -p no:cacheprovider \
      tests/gpu/test_health_gpu.py tests/gpu/test_profile_gpu.py::test_ddp_all_reduce_not_hidden_is_comm_bound \
      tests/attach/test_ddp_torchrun.py tests/exporter/test_multinode_torchrun.py 2>&1 | tee "$out/x2-tests.log"
    wait
    timeout 150 python3 benchmarks/advisor_categories.py --case memory_imbalance --duration 15 --warmup 5 --out "$out" \
      2>&1 | tee "$out/advisor_memory_imbalance.log" ;;
  open)      # what issues 24-26 still owe on one GPU, then the 2-GPU comm_bound scenario (about 9 min): start-up CPU
             # beside nvitop; the stack sampler's cost in paired rounds; ddp_manual_allreduce against its ablation
    timeout 60 python3 benchmarks/startup_cpu.py --live --rounds 6 --nvitop nvitop 2>&1 | tee "$out/startup_cpu.log"
    timeout 240 python3 benchmarks/hook_overhead.py --variants off hook hook_no_sampler --rounds 6 --windows 3 \
      --steps 400 --json "$out/sampler_overhead.json" 2>&1 | tee "$out/sampler_overhead.log"
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
      timeout 250 python3 benchmarks/scenario_truth.py --only ddp_manual_allreduce --truth-duration 12 --duration 15 \
        --out "$out/scenario-truth-ddp.json" 2>&1 | tee "$out/scenario_truth_ddp.log"
    fi ;;
  open1)     # the one-GPU scenarios left unchecked (about 4 min)
    timeout 230 python3 benchmarks/scenario_truth.py --only two_cause_loader_sync --only logging_sync \
      --attach-after 15 --truth-duration 12 --duration 15 --out "$out/scenario-truth-open.json" 2>&1 \
      | tee "$out/scenario_truth_open.log" ;;
  x2open)    # on nvidia-h200-x2 (carry .deb/ with the prometheus package): a 2-node NCCL torchrun (one GPU a node)
             # scraped by a real Prometheus, everything the fleet read kept; the 2-GPU NCCL scenario against its
             # ablation (live comm timing, auto-capture), `gpumon exporter --dcgm-names` scraped from the real GPUs
             # while it runs, and a recording of both GPUs with the fields --dcgm-names serves (about 8 min)
    if ls .deb/prometheus_*.deb >/dev/null 2>&1; then dpkg -x .deb/prometheus_*.deb /tmp/prom; export PATH=/tmp/prom/usr/bin:$PATH; fi
    python3 -m gpumon record "$out/h200x2-dcgm-fields.jsonl" --duration 150 \
      --note "2 x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F): a 2-node NCCL torchrun, then a DDP job with hand-made all-reduces" \
      > "$out/record.log" 2>&1 &
    GPUMON_RECORD_PROMETHEUS="$out/prom" timeout 150 python3 -m pytest -v -rs -p no:cacheprovider \
      tests/exporter/test_multinode_torchrun.py 2>&1 | tee "$out/multinode.log"
    python3 -m gpumon exporter --listen 127.0.0.1:19400 --interval 1 --dcgm-names --no-jobs > "$out/exporter.log" 2>&1 & exporter=$!
    (sleep 75; curl -s 127.0.0.1:19400/metrics > "$out/dcgm-names-scrape.txt") &
    timeout 330 python3 benchmarks/scenario_truth.py --only ddp_manual_allreduce --truth-duration 12 --duration 15 \
      --out "$out/scenario-truth-ddp.json" 2>&1 | tee "$out/scenario_truth_ddp.log"
    kill $exporter; wait ;;
  screen)    # issue 26's cost with everything on, beside nvitop, then the demo's guided ladder (about 8.5 min)
    timeout 300 python3 benchmarks/monitor_overhead.py --rounds 3 --window 12 --json "$out/monitor_overhead.json" 2>&1 \
      | tee "$out/monitor_overhead.log"
    timeout 230 python3 benchmarks/advisor_categories.py --ladder --ladder-duration 15 --ladder-warmup 5 --out "$out" \
      2>&1 | tee "$out/ladder.log"
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && ls .deb/prometheus_*.deb >/dev/null 2>&1; then
      dpkg -x .deb/prometheus_*.deb /tmp/prom; export PATH=/tmp/prom/usr/bin:$PATH
      GPUMON_RECORD_PROMETHEUS="$out/prom" timeout 120 python3 -m pytest -v -rs -p no:cacheprovider \
        "tests/exporter/test_multinode_torchrun.py::test_two_node_torchrun_is_one_job_in_the_fleet_and_in_gpumon_jobs[nccl]" \
        2>&1 | tee "$out/multinode.log"
    fi ;;
  proof24)   # issue 24's last two proofs on one GPU (each prints as it goes): the stack sampler's cost (its CPU a sample, and
             # steps/s with and without it, paired in one process), then the demo's guided ladder,
             # then the live knobs against a fresh trial on CUDA (about 8.5 min)
    CUDA_VISIBLE_DEVICES=0 timeout 110 python3 benchmarks/hook_overhead.py --sampler-cost --loops tensor --rounds 80 \
      --steps 100 --warmup 40 --json "$out/sampler_cost.json" 2>&1 | grep --line-buffered -v Warning \
      | tee "$out/sampler_cost.log"
    CUDA_VISIBLE_DEVICES=0 timeout 250 python3 benchmarks/advisor_categories.py --ladder --ladder-duration 15 \
      --ladder-warmup 5 --out "$out" 2>&1 | tee "$out/ladder.log" | tail -60
    CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -v -s -p no:cacheprovider tests/gpu/test_guided_live_gpu.py \
      2>&1 | tee "$out/guided_live.log" | tail -30 ;;
  final24)   # issue 24's proofs after the sampler's stack cache and the guided run's settled-verdict stop (about 8.5 min): the
             # sampler's cost (off, on, on without its stream query), the demo's guided ladder, the live knobs against a
             # fresh trial on CUDA
    CUDA_VISIBLE_DEVICES=0 timeout 100 python3 benchmarks/hook_overhead.py --sampler-cost --loops tensor --rounds 50 \
      --steps 100 --warmup 40 --json "$out/sampler_cost.json" 2>&1 | grep --line-buffered -v Warning \
      | tee "$out/sampler_cost.log" | tail -4
    CUDA_VISIBLE_DEVICES=0 timeout 220 python3 benchmarks/advisor_categories.py --ladder --ladder-duration 15 \
      --ladder-warmup 5 --out "$out" 2>&1 | tee "$out/ladder.log" | tail -45
    CUDA_VISIBLE_DEVICES=0 timeout 180 python3 -m pytest -v -s -p no:cacheprovider \
      "tests/gpu/test_guided_live_gpu.py::test_the_demos_own_knobs_go_live_on_the_running_cuda_trial_and_measure_what_a_fresh_run_does" \
      2>&1 | tee "$out/guided_live.log" | tail -25 ;;
  final26)   # issue 26's cost with everything on, on 2 GPUs (about 8 min): NVML's share first (each call's CPU, GPM with and
             # without graphics_activity, the first sample), then gpumon beside nvitop at 1 s and 0.25 s; then, on GPU 0,
             # issue 24's two-cause loader scenario against its `cached` ablation (the whole data wait)
    timeout 40 python3 benchmarks/sampler_tick_cost.py --fast 20 --slow 5 --calls 30 2>&1 | tee "$out/sampler_tick_cost.log"
    timeout 300 python3 benchmarks/monitor_overhead.py --rounds 3 --window 12 --json "$out/monitor_overhead.json" 2>&1 \
      | tee "$out/monitor_overhead.log" | tail -30
    CUDA_VISIBLE_DEVICES=0 timeout 170 python3 benchmarks/scenario_truth.py --only two_cause_loader_sync --rounds 2 \
      --truth-duration 6 --duration 10 --attach-after 10 --out "$out/scenario-truth-two-cause.json" 2>&1 \
      | tee "$out/scenario_truth_two_cause.log" | tail -20 ;;
  screen26)  # issue 26 items 7 and 6 after the key bar and the frame cuts, on 2 GPUs (about 6 min): gpumon beside nvitop
             # at 1 s and 0.25 s with everything on, then the start-up beside nvitop with its py-spy start
    timeout 300 python3 benchmarks/monitor_overhead.py --rounds 3 --window 12 --json "$out/monitor_overhead.json" 2>&1 \
      | tee "$out/monitor_overhead.log" | tail -30
    timeout 120 python3 benchmarks/startup_cpu.py --live --rounds 4 --nvitop nvitop --py-spy "$out/start.raw" 2>&1 \
      | tee "$out/startup_cpu.log" | head -12 ;;
  start)     # issue 26 item 6: start-up beside nvitop, then where it goes (one more start under py-spy; about 1.5 min)
    timeout 120 python3 benchmarks/startup_cpu.py --live --rounds 4 --nvitop nvitop --py-spy "$out/start.raw" 2>&1 \
      | tee "$out/startup_cpu.log" | tail -100 ;;
  sweep)     # issue 24 item 8 on GPU 0: the guided run's num_workers climb on loader_bound, then a manual sweep of
             # num_workers (0, 1, 2, 4, 8, 12, 16, every 8, the cores less two, the cores), each a trial run with the
             # guided run's measurement; ARGS are added, e.g. --workers 2 8 16 30 (5-8 min on 32 cores)
    CUDA_VISIBLE_DEVICES=0 timeout 550 python3 benchmarks/guided_vs_sweep.py --device cuda "$@" --out "$out" 2>&1 \
      | grep --line-buffered -v Warning | tee "$out/guided_vs_sweep.log" ;;
  where26)   # issue 26 item 7: where the live dashboard's CPU goes on 2 GPUs, per thread and under py-spy, at 1 s and
             # 0.25 s, then the same recording replayed and the in-process frame work, to set this box against the VM
             # (about 3.5 min)
    rec=assets/recordings/h200x2-dcgm-fields.jsonl.gz
    timeout 70 python3 benchmarks/dashboard_threads.py --interval 1 --window 30 --py-spy "$out/live1s.raw" \
      --json "$out/threads_live1s.json" 2>&1 | tee "$out/threads_live1s.log" | head -40
    timeout 60 python3 benchmarks/dashboard_threads.py --interval 0.25 --window 20 --py-spy "$out/live025s.raw" \
      --json "$out/threads_live025s.json" 2>&1 | tee "$out/threads_live025s.log" | head -30
    timeout 70 python3 benchmarks/dashboard_threads.py --replay "$rec" --window 30 --py-spy "$out/replay1s.raw" \
      --json "$out/threads_replay1s.json" 2>&1 | tee "$out/threads_replay1s.log" | head -30
    timeout 90 python3 benchmarks/tui_render_cost.py "$rec" --gpus 2 --size 160x50 --ticks 200 --warmup 100 2>&1 \
      | tee "$out/tui_render_cost.log" | tail -15 ;;
  screen26c) # issue 26 item 7 after the cuts that where26 pointed to: gpumon beside nvitop and beside gpumon at the
             # session's start (--base, a checkout carried in base26/, e.g. `git archive REV | tar -x -C base26`), at 1 s
             # and 0.25 s, then where the dashboard's CPU goes at 1 s (about 8 min)
    base=(); [ -f base26/gpumon/__main__.py ] && base=(--base base26)
    timeout 480 python3 benchmarks/monitor_overhead.py --rounds 3 --window 12 "${base[@]}" \
      --json "$out/monitor_overhead.json" 2>&1 | tee "$out/monitor_overhead.log" | tail -30
    timeout 60 python3 benchmarks/dashboard_threads.py --interval 1 --window 30 --json "$out/threads_live1s.json" 2>&1 \
      | tee "$out/threads_live1s.log" | head -20 ;;
  diag26)    # issue 26 item 7: NVLink rates from GPM beside the counters, then the UI thread live and replaying the
             # 2x H200 recording on this box under cProfile (to see what the live dashboard does that a replay does not),
             # then the live threads without a profiler (about 3.5 min)
    rec=assets/recordings/h200x2-dcgm-fields.jsonl.gz
    timeout 60 python3 benchmarks/nvlink_gpm_check.py --seconds 6 2>&1 | tee "$out/nvlink_gpm_check.log"
    timeout 70 python3 benchmarks/dashboard_threads.py --interval 1 --window 30 --cprofile 70 "$out/live1s.prof" 2>&1 \
      | tee "$out/threads_live1s_cprofile.log" | head -20
    timeout 70 python3 benchmarks/dashboard_threads.py --replay "$rec" --window 30 --cprofile 70 "$out/replay1s.prof" \
      2>&1 | tee "$out/threads_replay1s_cprofile.log" | head -20
    timeout 70 python3 benchmarks/dashboard_threads.py --interval 1 --window 30 --json "$out/threads_live1s.json" 2>&1 \
      | tee "$out/threads_live1s.log" | head -20 ;;
  screen26d) # issue 26 item 7 after the NVLink and process-table cuts (on 2 GPUs, about 8 min): NVLink from GPM beside
             # the counters and the load's own count, then gpumon beside nvitop at 1 s and 0.25 s over 20-s windows,
             # then where gpumon's CPU goes at 1 s
    timeout 60 python3 benchmarks/nvlink_gpm_check.py --seconds 6 2>&1 | tee "$out/nvlink_gpm_check.log" | tail -4
    timeout 420 python3 benchmarks/monitor_overhead.py --rounds 3 --window 20 --json "$out/monitor_overhead.json" 2>&1 \
      | tee "$out/monitor_overhead.log" | tail -12
    timeout 60 python3 benchmarks/dashboard_threads.py --interval 1 --window 30 --json "$out/threads_live1s.json" 2>&1 \
      | tee "$out/threads_live1s.log" | head -20 ;;
  screen26e) # issue 26 item 7 after the process-table and /sys/block cuts (on 2 GPUs, about 8 min): the host
             # collector's cost against a checkout carried in base26/ (the tree before /sys/block was read), then
             # gpumon beside nvitop at 1 s and 0.25 s over 20-s windows, then where gpumon's CPU goes at 1 s
    [ -f base26/gpumon/__main__.py ] && timeout 90 python3 benchmarks/host_collect_cost.py --against base26 --rounds 5 \
      --calls 500 2>&1 | tee "$out/host_collect_cost.log" | tail -14
    timeout 420 python3 benchmarks/monitor_overhead.py --rounds 3 --window 20 --json "$out/monitor_overhead.json" 2>&1 \
      | tee "$out/monitor_overhead.log" | tail -12
    timeout 60 python3 benchmarks/dashboard_threads.py --interval 1 --window 30 --json "$out/threads_live1s.json" 2>&1 \
      | tee "$out/threads_live1s.log" | head -20 ;;
  confirm26) # issue 26 item 7 at 1 s once more, over 5 alternated rounds (about 6 min)
    timeout 400 python3 benchmarks/monitor_overhead.py --intervals 1 --rounds 5 --window 20 \
      --json "$out/monitor_overhead.json" 2>&1 | tee "$out/monitor_overhead.log" | tail -16 ;;
  pcie26)    # GPM's PCIe rates against the bytes a host<->GPU copy load counts (one GPU, about 30 s)
    timeout 60 python3 benchmarks/pcie_gpm_check.py --seconds 6 2>&1 | tee "$out/pcie_gpm_check.log" ;;
  tune35)    # the generated corpus's tuning seeds, then the hook's cost in one process and under floods (about 9 min)
    [ $# -gt 0 ] || set -- --set tune --count 10
    timeout 380 python3 benchmarks/scenario_corpus.py "$@" --duration 4 --warmup 2 --rounds 2 --window 1 \
      --out "$out/corpus-tune.json" > "$out/corpus-tune.log" 2>&1
    tail -30 "$out/corpus-tune.md"
    timeout 70 python3 benchmarks/hook_cost_inprocess.py --device cuda --pairs 7 --window 2 \
      --out "$out/hook_cost_inprocess.json" 2>&1 | tail -4
    timeout 120 python3 benchmarks/hook_flood.py --device cuda --rounds 2 --window 3 --json "$out/hook_flood.json" 2>&1 \
      | tail -12 ;;
  heldout35) # held-out seeds of the generated corpus (ARGS: --start N --count M; about 34 s a job)
    timeout 470 python3 benchmarks/scenario_corpus.py --set heldout "$@" --duration 4 --warmup 2 --rounds 2 \
      --window 1 --out "$out/corpus-heldout.json" > "$out/corpus-heldout.log" 2>&1
    tail -40 "$out/corpus-heldout.md" ;;
  heldout2)  # held-out seeds on both GPUs at once (nvidia-h200-x2), one runner per GPU: ARGS are the seeds, each
             # runner takes every other one (a seed needing 2 GPUs is skipped there); the two results merged in
             # corpus-heldout.json/.md. About 40 s a job per GPU; each runner is cut at RUNNER_S (500) s, which 12
             # seeds a runner can pass (seed 1182 was cut at 500 s): leave the call's limit room for start and merge
    seeds=("$@"); pids=()
    for gpu in 0 1; do
      mine=(); for ((i = gpu; i < ${#seeds[@]}; i += 2)); do mine+=(--seed "${seeds[i]}"); done
      CUDA_VISIBLE_DEVICES=$gpu timeout "${RUNNER_S:-500}" python3 benchmarks/scenario_corpus.py --set heldout "${mine[@]}" \
        --duration 4 --warmup 2 --rounds 2 --window 1 --out "$out/corpus-heldout-gpu$gpu.json" \
        > "$out/corpus-heldout-gpu$gpu.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    python3 benchmarks/scenario_corpus.py --merge "$out"/corpus-heldout-gpu0.json "$out"/corpus-heldout-gpu1.json \
      --out "$out/corpus-heldout.json" | tail -8 ;;
  records35) # whether slow hooked jobs' step records reach a subscriber (about 2.5 min): the held-out seeds whose
             # diagnosis saw no step in its window (1053, 1081: 2-6 steps/s), then a faster one (1060) as the control;
             # ARGS replace the seeds
    [ $# -gt 0 ] || set -- 1053 1081 1060
    for seed in "$@"; do
      CUDA_VISIBLE_DEVICES=0 timeout 150 python3 benchmarks/step_delivery_check.py --seed "$seed" --seconds 8 \
        --json "$out/step-delivery-$seed.json" 2>&1 | tee "$out/step-delivery-$seed.log" | tail -12
    done ;;
  live37)    # issue 37 item 7 on GPU 0 (at most 460 s, each step capped inside): the long-epoch loader job (2 workers,
             # 10M samples, persistent) climbed live by `experiment --pid`, then the trial-run path on it; a GC-churn job
             # and an empty_cache job, each its ablation truth then `experiment --pid`; the demo's panel after a guided
             # run, SVGs at 160 and 120 columns. Each step merges into live-fixes.json (.md beside); ARGS are added to
             # each (e.g. --plan loader_live=4,3,5,115)
    for step in loader:258 gc_churn:54 empty_cache:54 panel:94; do
      CUDA_VISIBLE_DEVICES=0 timeout "${step#*:}" python3 benchmarks/live_fixes.py --device cuda --only "${step%:*}" "$@" \
        --out "$out/live-fixes.json" 2>&1 | grep --line-buffered -v Warning | tee -a "$out/live-fixes.log" | tail -6
    done
    # the device tool brings back 8 files: the SVGs and job logs travel packed (lost that way once, 2026-11-29)
    (cd "$out" && tar czf live37-files.tgz -- *.svg *-job.log panel-demo.log 2>/dev/null \
      && rm -f -- *.svg *-job.log panel-demo.log)
    cat "$out/live-fixes.md" ;;
  flood36)   # the hook's server under the floods that cost the CUDA job steps/s (issue 36 item 3), then the GIL-bound
             # Python loop (about 3 min). ARGS are added to both, e.g. `--trees before=before36 after=. --rounds 2` with
             # the code before in before36/ (mkdir before36; git archive 5d51183 gpumon | tar -x -C before36): the two
             # interleaved, about 4.5 min
    timeout 180 python3 benchmarks/hook_flood.py --device cuda --floods resubscribe:5 get_state subscribers dashboard \
      --rounds 3 --window 3 "$@" --json "$out/hook_flood_cuda.json" > "$out/hook_flood_cuda.log" 2>&1
    tail -11 "$out/hook_flood_cuda.log"
    timeout 80 python3 benchmarks/hook_flood.py --device cpu --job python --floods get_state subscribers --rounds 3 \
      --window 3 "$@" --json "$out/hook_flood_python.json" > "$out/hook_flood_python.log" 2>&1
    tail -7 "$out/hook_flood_python.log" ;;
  flood36all) # issue 36 item 3 on the final tree: every flood of the issue (connect flood, backlog re-subscribe at the
             # allowed rate and at 5/s, 8 get_state flooders, 8 fastest subscribers, huge and NaN ids) and a dashboard,
             # against quiet windows, on the CUDA MLP job (DEVICE=cuda, about 4 min) or the CPU one (DEVICE=cpu)
    device="${DEVICE:-cuda}"
    timeout 290 python3 benchmarks/hook_flood.py --device "$device" --floods connect:1000 resubscribe resubscribe:5 \
      get_state subscribers huge_ids nan_ids dashboard --rounds 3 --window 3 "$@" \
      --json "$out/hook_flood_all_$device.json" > "$out/hook_flood_all_$device.log" 2>&1
    tail -16 "$out/hook_flood_all_$device.log" ;;
  nvlink38)  # issue 38 item 6 on 2 GPUs (about 2.5 min): each rank's NVLink rate under one NCCL all-reduce, sampled as
             # the dashboard samples (GPM) at 1 s and 0.25 s, against the bytes the ranks count, stale repeats, ~0 once
             # the traffic ends; then the tests/gpu NVLink tests (that all-reduce from GPM and from the counters at
             # 0.25 s, a peer copy). ARGS are added to both benchmark runs. The runs' files travel packed
    for interval in 1 0.25; do
      timeout 300 python3 benchmarks/nvlink_allreduce_check.py --interval "$interval" "$@" --out "$out" 2>&1 \
        | grep -v -e '^ *[0-9.-]* *\(before\|edge\)' | tail -45
    done
    timeout 330 python3 -m pytest -v -s -rs -p no:cacheprovider tests/gpu/test_nvlink_allreduce_gpu.py \
      tests/gpu/test_health_gpu.py::test_nvlink_rates_while_a_copy_crosses_between_two_gpus 2>&1 \
      | tee "$out/nvlink38-tests.log" | grep -e PASSED -e FAILED -e SKIPPED -e Error -e 'passed\|failed' | tail -20
    (cd "$out" && tar czf nvlink38-files.tgz -- nvlink_allreduce-* && rm -f -- nvlink_allreduce-*) ;;
  *) echo "unknown part: $part" >&2; exit 2 ;;
esac
