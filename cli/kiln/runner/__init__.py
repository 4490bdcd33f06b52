"""kiln's execution engine: the only package that talks to ansible-runner.

- `engine.run_playbook(request, recorder, targets)` runs one playbook (the one ansible_runner
  import in kiln lives in engine.py);
- `provision.provision(cluster, options, listener=...)` runs the stages in order under the
  inventory lock and writes the run record;
- `records`, `lock`, `stages`, `hostpattern`, `events`: run records, the per-inventory lock,
  the stage list, `--limit` patterns and the event recorder;
- `callback/awx_display.py` is not imported by kiln: ansible-playbook loads it as its stdout
  callback (ansible-runner's, less the events kiln never reads; see engine.ansible_settings).

Import the submodules directly; this file imports nothing so `kiln --help` stays fast.
"""
