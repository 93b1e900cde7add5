"""Run at start-up of every Python process launched by `gpumon run`: installs gpumon's hook (which
waits for `import torch`, so processes without torch pay almost nothing), then runs the
sitecustomize this one shadows, if any. Never raises for gpumon's own part."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install_gpumon_hook() -> None:
    try:
        if "gpumon" not in sys.modules:
            # Load gpumon from this file's installation, without putting its site-packages on the path:
            # the job may run in another environment, which only needs torch.
            import importlib.util

            package_dir = os.path.dirname(os.path.dirname(_HERE))
            spec = importlib.util.spec_from_file_location(
                "gpumon", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir]
            )
            if spec is None or spec.loader is None:
                return
            module = importlib.util.module_from_spec(spec)
            sys.modules["gpumon"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["gpumon"]
                raise
        import gpumon.hook  # noqa: F401 - installs
    except Exception:  # noqa: BLE001 - a hook that cannot install must never stop the job's interpreter
        if os.environ.get("GPUMON_HOOK_DEBUG"):
            import traceback

            traceback.print_exc()


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install_gpumon_hook()
_run_shadowed_sitecustomize()
