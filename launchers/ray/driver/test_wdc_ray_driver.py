"""Unit tests of wdc_ray_driver.py against a stub `ray` module.

Run: python3 -m unittest discover -s launchers/ray/driver -p 'test_*.py'
(launchers/ray's Go tests run it).
"""

import io
import json
import types
import unittest

import wdc_ray_driver as driver


class GetTimeoutError(Exception):
    pass


class StubRay:
    """Records what the driver asks of Ray; runs remote functions inline."""

    def __init__(self, ready=True, exec_code=0):
        self.calls = []
        self.ready = ready
        self.exec_code = exec_code
        self.exceptions = types.SimpleNamespace(GetTimeoutError=GetTimeoutError)
        stub = self

        class PG:
            def __init__(self, bundles, strategy, name):
                self.bundles, self.strategy, self.name = bundles, strategy, name

            def ready(self):
                return ("ready", self)

        def placement_group(bundles, strategy="PACK", name=""):
            pg = PG(bundles, strategy, name)
            stub.calls.append(("placement_group", bundles, strategy, name))
            stub.pg = pg
            return pg

        def remove_placement_group(pg):
            stub.calls.append(("remove_placement_group", pg.name))

        class Strategy:
            def __init__(self, placement_group, placement_group_bundle_index, placement_group_capture_child_tasks):
                self.pg = placement_group
                self.index = placement_group_bundle_index
                self.capture = placement_group_capture_child_tasks

        pgmod = types.ModuleType("ray.util.placement_group")
        pgmod.placement_group = placement_group
        pgmod.remove_placement_group = remove_placement_group
        ssmod = types.ModuleType("ray.util.scheduling_strategies")
        ssmod.PlacementGroupSchedulingStrategy = Strategy
        import sys

        sys.modules["ray"] = self
        sys.modules["ray.util"] = types.ModuleType("ray.util")
        sys.modules["ray.util.placement_group"] = pgmod
        sys.modules["ray.util.scheduling_strategies"] = ssmod

    def init(self):
        self.calls.append(("init",))

    def get(self, ref, timeout=None):
        if isinstance(ref, tuple) and ref[0] == "ready":
            self.calls.append(("wait_ready", timeout))
            if not self.ready:
                raise GetTimeoutError()
            return None
        return ref

    def remote(self, fn):
        stub = self

        class Remote:
            def options(self, **opts):
                stub.calls.append(("options", opts))
                return self

            def remote(self, argv):
                stub.calls.append(("run", argv))
                return stub.exec_code

        return Remote()


def settings(**overrides):
    spec = {"bundles": [{"CPU": 2, "GPU": 1, "accel": 1}, {"CPU": 1}], "strategy": "STRICT_SPREAD",
            "timeout_seconds": 7, "name": "t1-a1-f1"}
    spec.update(overrides)
    return {"WDC_RAY_PLACEMENT": json.dumps(spec), "WDC_RAY_EXEC_ARGV": json.dumps(["wdc", "exec"])}


class DriverTest(unittest.TestCase):
    def test_runs_wdc_exec_in_bundle_zero_and_removes_the_group(self):
        ray = StubRay(exec_code=0)
        out = io.StringIO()
        self.assertEqual(driver.main(ray, settings(), out), 0)
        names = [c[0] for c in ray.calls]
        self.assertEqual(names, ["init", "placement_group", "wait_ready", "options", "run", "remove_placement_group"])
        self.assertEqual(ray.calls[1], ("placement_group", [{"CPU": 2, "GPU": 1, "accel": 1}, {"CPU": 1}], "STRICT_SPREAD", "t1-a1-f1"))
        self.assertEqual(ray.calls[2], ("wait_ready", 7.0))
        opts = ray.calls[3][1]
        strategy = opts.pop("scheduling_strategy")
        self.assertIs(strategy.pg, ray.pg)
        self.assertEqual(strategy.index, 0)
        self.assertTrue(strategy.capture)
        self.assertEqual(opts, {"num_cpus": 2, "num_gpus": 1, "resources": {"accel": 1}, "max_retries": 0})
        self.assertEqual(ray.calls[4], ("run", ["wdc", "exec"]))
        self.assertIn("placement group ready", out.getvalue())

    def test_exit_code_of_wdc_exec_is_the_drivers(self):
        ray = StubRay(exec_code=6)
        self.assertEqual(driver.main(ray, settings(), io.StringIO()), 6)
        self.assertEqual(ray.calls[-1][0], "remove_placement_group")

    def test_group_not_placed_in_time(self):
        ray = StubRay(ready=False)
        out = io.StringIO()
        self.assertEqual(driver.main(ray, settings(), out), driver.PLACEMENT_TIMEOUT_EXIT)
        self.assertIn(driver.PLACEMENT_TIMEOUT_MARKER, out.getvalue())
        names = [c[0] for c in ray.calls]
        self.assertNotIn("run", names, "wdc exec never starts")
        self.assertEqual(names[-1], "remove_placement_group", "the group is removed")

    def test_default_strategy_and_timeout(self):
        ray = StubRay()
        env = settings()
        spec = json.loads(env["WDC_RAY_PLACEMENT"])
        del spec["strategy"], spec["timeout_seconds"]
        env["WDC_RAY_PLACEMENT"] = json.dumps(spec)
        self.assertEqual(driver.main(ray, env, io.StringIO()), 0)
        self.assertEqual(ray.calls[1][2], "PACK")
        self.assertEqual(ray.calls[2], ("wait_ready", 300.0))

    def test_bad_settings_touch_no_ray(self):
        for env in ({}, {"WDC_RAY_PLACEMENT": "{", "WDC_RAY_EXEC_ARGV": "[]"}, settings(bundles=[])):
            ray = StubRay()
            out = io.StringIO()
            self.assertEqual(driver.main(ray, env, out), driver.BAD_SETTINGS_EXIT)
            self.assertEqual(ray.calls, [])
            self.assertIn("bad settings", out.getvalue())

    def test_memory_and_custom_only_bundle(self):
        self.assertEqual(driver.task_options({"memory": 1024, "x": 2}), {"num_cpus": 0, "memory": 1024, "resources": {"x": 2}})


if __name__ == "__main__":
    unittest.main()
