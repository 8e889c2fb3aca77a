"""What every live experiment runs on: the cluster, one policy run, the jobs, and the measurements."""
