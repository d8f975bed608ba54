"""TRL GRPOTrainer subclasses with diversity methods. Import from `divrl` (lazy) or the submodules:
`divrl.trainers.config` (DivRLConfig), `divrl.trainers.divrl_trainer` (DivRLTrainer), `divrl.trainers.presets`.
Kept empty so that importing `divrl.trainers` stays light."""
