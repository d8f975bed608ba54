"""TRL GRPOTrainer subclasses with diversity methods. Import from `divrl` (lazy) or the submodules:
`divrl.trainers.config` (DivRLConfig), `divrl.trainers.divrl_trainer` (DivRLTrainer), `divrl.trainers.presets`.
Kept empty so that `divrl.trainers.sample_reference_cli` stays light for `divrl --help`."""
