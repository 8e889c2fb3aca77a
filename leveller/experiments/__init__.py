"""The live experiments: the paper's claims on real packets of the emulated cluster.

One subpackage per experiment, one for what they share; each experiment's command is
leveller/commands/experiment_<name>.py (the demo's: leveller/commands/demo.py).

- ``shared``: what every experiment runs on: the cluster (testbed + SDN app, ``cluster``), one policy
  run with controller, agents and jobs (``policy_run``), the emulated job (``jobs``), the default
  one-switch star (``star``), R from the iteration logs (``measure``), the switching options
  (``switching``), TCP counters (``tcpstats``), /proc readings (``procstat``), option checks
  (``options``) and signal handling (``interrupts``);
- ``demo``: `leveller demo`, the paper's worked examples (pair, trio) under every policy;
- ``tenants``: Figures 9 and 10, 2-4 tenants on a leaf-spine or three jobs on one bottleneck;
- ``chaos``: the demo's pair while parts of the system are killed and restarted;
- ``soak``: the demo's trio for hours, memory and open files of every service sampled;
- ``recovery``: cumulative vs windowed vs decayed R after a disturbance.

Inside an experiment: ``run.py`` runs it (what its command calls), ``report.py`` / ``table.py`` print
and keep its results, ``plot.py`` draws them, ``model.py`` is its fluid model; pure parts say so in
their docstring. An experiment imports ``shared`` and the demo's examples (``demo.scenario``), never
another experiment (tests/unit/test_layers.py). CONTRIBUTING.md says how to add one.
"""
