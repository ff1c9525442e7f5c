"""The knobs: what each is (the catalog read from ``pg_settings``), its values as text, the
rule-of-thumb values (PGTune), setting values online with a check that they took effect
(``ALTER SYSTEM`` + reload), and the values in force. Restarts are the controllers'
(:mod:`tuner_client.servers.controllers`); the measurer's :mod:`~tuner_client.measurer.applying`
chooses between the two."""
