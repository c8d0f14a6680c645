"""A stub of the ray package for the launcher's placement-group test: it
records each call on stdout (the job's log) and runs remote functions in
this process. STUB_RAY_NEVER_READY makes placement groups never ready."""
import json
import os

from . import exceptions  # noqa: F401


def _log(*args):
    print("stub-ray " + json.dumps(args), flush=True)


def init():
    _log("init")


def get(ref, timeout=None):
    if isinstance(ref, tuple) and ref and ref[0] == "ready":
        _log("wait", timeout)
        if os.environ.get("STUB_RAY_NEVER_READY"):
            raise exceptions.GetTimeoutError()
        return None
    return ref


def remote(fn):
    class Remote:
        def options(self, **opts):
            strategy = opts.pop("scheduling_strategy")
            _log("options", opts, strategy.placement_group_bundle_index, strategy.placement_group_capture_child_tasks)
            return self

        def remote(self, *args):
            return fn(*args)

    return Remote()
