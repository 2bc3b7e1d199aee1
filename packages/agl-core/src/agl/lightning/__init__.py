"""LightningRL: from a rollout's spans to training transitions (credit assignment)."""
