"""The demo asks its hook for DataLoader settings set live: pending until a new iter() applies them, nothing without
a hook, and it stops asking when an iter() cannot apply them (no new pass every step)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from gpumon_demo.live_knobs import LiveLoaderSettings  # noqa: E402


class HookRuntime:
    """The two things the demo reads of the hook's runtime, as gpumon.hook.runtime.HookRuntime has them."""

    def __init__(self, knobs: dict[str, Any], active: bool = True) -> None:
        self.knobs = types.SimpleNamespace(dataloader=knobs)  # gpumon.hook.knob_state.KnobState's
        self.active = active


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    state = types.SimpleNamespace(runtime=None)
    lifecycle = types.ModuleType("gpumon.hook.lifecycle")
    lifecycle.runtime = lambda: state.runtime  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpumon.hook.lifecycle", lifecycle)
    return state


def loader() -> DataLoader:  # type: ignore[type-arg]
    return DataLoader(list(range(64)), batch_size=8, num_workers=0)


def test_no_hook_no_new_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "gpumon.hook.lifecycle", raising=False)
    assert not LiveLoaderSettings().pending(loader())


def test_a_live_setting_is_pending_until_the_loader_has_it(hook: types.SimpleNamespace) -> None:
    data = loader()
    watch = LiveLoaderSettings()
    assert not watch.pending(data), "no runtime yet"
    hook.runtime = HookRuntime({"num_workers": 2, "prefetch_factor": None})
    assert watch.pending(data)
    data.num_workers = 2  # what the hook's iter() patch does before building the iterator
    assert not watch.pending(data), "None (the library's default prefetch) matches whatever the loader shows"
    hook.runtime.active = False
    data.num_workers = 0
    assert not watch.pending(data), "an inactive hook applies nothing at iter()"


def test_it_stops_asking_when_an_iter_cannot_apply_the_settings(hook: types.SimpleNamespace) -> None:
    data = loader()
    hook.runtime = HookRuntime({"pin_memory": True})
    watch = LiveLoaderSettings()
    assert watch.pending(data)
    watch.applied(data)  # iter() left pin_memory off: this hook cannot apply it
    assert not watch.pending(data)
