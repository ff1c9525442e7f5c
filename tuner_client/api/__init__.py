"""The typed client API: :func:`~tuner_client.api.client.connect` to a server over HTTP
(:mod:`.transport`) or standalone in-process (:mod:`.standalone`), and prior data through it.
``from tuner_client.api.client import connect`` is the documented import (a re-export)."""
