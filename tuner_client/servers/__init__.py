"""The PostgreSQL servers a run works on: which one (:mod:`.target`: a DSN, or the embedded
cluster it creates and fills), how it is started and restarted (:mod:`.controllers`), the
embedded cluster and its files, PostgreSQL's binaries, and the host's memory and cgroups."""
