"""wdc's Ray job driver for attempts that ask for a placement group.

The Ray Jobs REST API has no placement-group field, so the Ray launcher
makes this file the job's entrypoint: its source travels in
runtime_env.env_vars as WDC_RAY_DRIVER and runs as
python3 -c "$WDC_RAY_DRIVER". It reads its settings from the same
environment:

  WDC_RAY_PLACEMENT  JSON {"bundles": [{"CPU": 1}, ...], "strategy": "PACK",
                     "timeout_seconds": 300, "name": "<submission id>"}
  WDC_RAY_EXEC_ARGV  JSON list: the `wdc exec` command line

It creates the placement group, waits for it at most timeout_seconds, runs
`wdc exec` as a Ray task scheduled into bundle 0 (with bundle 0's
resources, child tasks captured by the group, never retried by Ray: wdc
owns retries), removes the group, and exits with wdc exec's exit code.
If the group is not placed in time it prints PLACEMENT_TIMEOUT_MARKER and
exits PLACEMENT_TIMEOUT_EXIT; the launcher reports that launch_failed.
"""

import json
import os
import subprocess
import sys

PLACEMENT_TIMEOUT_MARKER = "wdc-ray-driver: placement group not placed"
PLACEMENT_TIMEOUT_EXIT = 3
BAD_SETTINGS_EXIT = 2


def task_options(bundle):
    """Ray task options that ask for exactly one bundle's resources."""
    opts = {"num_cpus": 0, "resources": {}}
    for name, amount in bundle.items():
        if name == "CPU":
            opts["num_cpus"] = amount
        elif name == "GPU":
            opts["num_gpus"] = amount
        elif name == "memory":
            opts["memory"] = amount
        else:
            opts["resources"][name] = amount
    if not opts["resources"]:
        del opts["resources"]
    return opts


def run_exec(argv):
    """Runs wdc exec in the Ray worker; its environment is the job's."""
    return subprocess.call(argv)


def main(ray=None, environ=None, out=None):
    environ = os.environ if environ is None else environ
    out = sys.stdout if out is None else out
    try:
        spec = json.loads(environ["WDC_RAY_PLACEMENT"])
        argv = json.loads(environ["WDC_RAY_EXEC_ARGV"])
        bundles = spec["bundles"]
        strategy = spec.get("strategy") or "PACK"
        timeout = float(spec.get("timeout_seconds") or 300)
        if not bundles or not argv:
            raise ValueError("bundles and argv must not be empty")
    except (KeyError, ValueError, TypeError) as e:
        print("wdc-ray-driver: bad settings: %s" % e, file=out, flush=True)
        return BAD_SETTINGS_EXIT
    if ray is None:
        import ray  # noqa: F811 (only on a Ray node)
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init()
    pg = placement_group(bundles, strategy=strategy, name=spec.get("name", ""))
    try:
        try:
            ray.get(pg.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            print("%s within %gs (bundles %s, strategy %s)" % (PLACEMENT_TIMEOUT_MARKER, timeout, json.dumps(bundles), strategy), file=out, flush=True)
            return PLACEMENT_TIMEOUT_EXIT
        print("wdc-ray-driver: placement group ready (%d bundles, %s); starting wdc exec in bundle 0" % (len(bundles), strategy), file=out, flush=True)
        remote = ray.remote(run_exec).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg,
                placement_group_bundle_index=0,
                placement_group_capture_child_tasks=True,
            ),
            max_retries=0,
            **task_options(bundles[0])
        )
        return int(ray.get(remote.remote(argv)))
    finally:
        remove_placement_group(pg)


if __name__ == "__main__":
    sys.exit(main())
