"""Training-job emulator and the iteration log-line format.

A job is W worker processes (possibly in different network namespaces) that
alternate compute (a sleep of C seconds) and communication (M seconds worth
of bytes at a given bottleneck rate over TCP), and log one line per finished
iteration. Real training code emits the same line with
``from leveller.jobs.hook import iteration_done; iteration_done()``.
"""
