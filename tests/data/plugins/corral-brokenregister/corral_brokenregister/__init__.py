"""corral-brokenregister: its ``corral_register`` hook registers one component, then raises."""
