"""The KV-pool calculator panel."""
