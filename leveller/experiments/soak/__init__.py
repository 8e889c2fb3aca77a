"""`leveller experiment soak`: the demo's trio for a long run, memory and open files of every service
sampled (run), growth and a verdict per process (report, pure)."""
