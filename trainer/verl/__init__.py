"""verl's own Ray trainer on arborl envs and estimators (`arborl verl-train`; `main.run_verl`)."""
