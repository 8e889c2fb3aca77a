"""`leveller experiment tenants`: the paper's testbed experiments, 2-4 tenants on a leaf-spine (Figure 10)
and three jobs on one bottleneck (Figure 9).

Pure parts: plan (jobs scaled to the links, placements, summaries), model (the network simulator on
the same placement); run drives the live runs, report and plot show them.
"""
