"""`leveller demo`: the paper's worked examples (pair, trio) on the one-switch star under every policy.

Pure parts: scenario (what runs where), results (tables, JSON, checks), model (the fluid model);
orchestrate drives the live runs, report and plot show them.
"""
