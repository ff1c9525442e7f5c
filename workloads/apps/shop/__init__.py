"""The example application "shop": schema, data and its SQL (see workloads/apps)."""
