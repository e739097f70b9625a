"""The fault and adversarial suite: crash matrix, Redis faults, forged input, load."""
