"""churn: jobs that come and go on the live leaf-spine, every policy on the same arrivals.

Jobs of the catalog arrive as a Poisson process, register with their hosts' agents by themselves
(the agents' registration socket: no agent flag names a job) and leave when done; the SDN app runs
once for the whole experiment, the controller and the agents once per policy, never restarted
while jobs come and go. ``plan`` draws the arrivals (pure), ``run`` runs them, ``report`` measures
(pure), ``plot`` draws the jobs over time with their levels.
"""
