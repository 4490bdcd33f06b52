"""kiln's state on the controller: run records under `.kiln/runs/<id>/` and the per-inventory lock.

- `runs`: the state dir ($KILN_HOME or ./.kiln), run ids, a run's record (summary, events,
  facts), which hosts earlier runs provisioned or left failed;
- `lock`: one provision at a time per inventory, with stale-lock detection;
- `burnin`: a burn-in's run record (its results, the manifest, report.json), read and written.

Import the submodules directly; this file imports nothing so `kiln --help` stays fast.
"""
