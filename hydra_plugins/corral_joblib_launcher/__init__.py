"""corral's preset of Hydra's joblib launcher (``hydra/launcher=joblib``): its settings checked before a sweep."""
