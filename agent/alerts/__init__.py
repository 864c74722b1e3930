"""Alert intake: Alertmanager webhooks grouped into incidents a person can act on (docs/alerts.md)."""
