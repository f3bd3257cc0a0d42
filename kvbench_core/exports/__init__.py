"""Results out, in the formats other tools read: tidy Parquet/CSV tables (``tables``, ``tabular``), the
I/O log as a Perfetto timeline (``perfetto``) and live OpenMetrics while a run runs (``live_metrics``).

A room of its own beside ``reports/``: reports are pages a person reads, exports are data another program
reads.  Each heavy dependency (pyarrow, prometheus-client) is imported when its export is asked for and
named, with the extra that brings it, when missing (``requires``)."""
