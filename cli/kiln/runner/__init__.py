"""kiln's execution engine: executes a Plan it is handed; the only package that talks to
ansible-runner. It never plans or renders: kiln.plan decides, the runner carries it out.

- `execute.execute(plan, lock=..., listener=...)` runs the plan's stages in order, each split
  into its shards, under the lock its caller holds, and returns a `result.RunResult`;
- `engine.run_playbook(request, recorder, targets)` runs one playbook (the one ansible_runner
  import in kiln lives in engine.py); `workers`: the same on a `kiln_workers` host;
- `merge`: finished shards folded into one stage outcome, and the rule that stops a rollout;
- `outcome`: StageOutcome and ShardOutcome, dicts only in the run record's summary;
- `events`: the event recorder and progress;
- `callback/awx_display.py` is not imported by kiln: ansible-playbook loads it as its stdout
  callback (ansible-runner's, less the events kiln never reads; see engine.ansible_settings).

Import the submodules directly; this file imports nothing so `kiln --help` stays fast.
"""
