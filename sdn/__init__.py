"""LEVELLER's os-ken OpenFlow 1.3 app: installs every flow's path and the DSCP -> queue mapping.

Modules: `rules` (messages as data), `logic` (pure event -> messages), `ofsend`
(data -> os-ken messages), `app` (the OSKenApp shim), `api` (HTTP JSON API),
`client` (Python client for the API), `main` (process entry, used by `leveller sdn`).
See sdn/README.md for the HTTP API.
"""
