"""Dataset-card templates (string.Template files), shipped as package data beside metashift_hf."""
