"""The read model: what pages, live pushes and `/metrics` show, read from the latest-state
tables and history and judged through `fleet.health` — never written here.

- `state.py`: the latest state read once; rack states, rack payloads and live updates
- `payloads.py`: each GPU, feed, rack liquid and loop as pages and pushes show them
- `site_summary.py`, `pue.py`: a site's strip; rolling PUE from energy
- `lost_gpus.py`: since when and why a lost GPU is lost
- `source_cadence.py`: which interval each entity's data comes at
- `summaries_sql.py`: the SQL fold of GPU summaries (checked against `fleet.health`)
- `history.py`: history in the tier that fits a range
- `live.py`: the Channels group names and the per-process live publisher
- `metrics/`: `/metrics`, Fleetwatch's view in the Prometheus text format
"""
