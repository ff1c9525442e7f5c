"""Crash safety on the user's server: whatever ends the tuner, the server goes back to the
configuration it had before the run.

- :mod:`.journal`: the durable restore journal, written and fsynced before the first change
  to a server (its identity, the original ``postgresql.auto.conf`` and settings, each change
  as it is applied); :mod:`.server_state` reads what it records from the server;
- :mod:`.hook`: every ``ALTER SYSTEM`` of the tuner is recorded in the journal first;
- :mod:`.recovery`: putting a server back from a journal, refusing when the server changed by
  hand since;
- :mod:`.guard`: the small supervisor process, started first, that outlives the tuner and
  restores the journal when the tuner ends without its completion mark (``kill -9``, the OOM
  killer, a closed terminal);
- :mod:`.run`: what a tuning run does with them (recover leftovers, open the journals, start
  the guard, mark completion).
"""
