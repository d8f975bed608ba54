"""`divrl sft`'s trainer: TRL's `SFTTrainer`, whose every save (the adapter and each checkpoint) carries divrl's model
card and records the base model by its portable name, as `DivRLTrainer`'s saves do (`divrl.trainers.model_card`).
Without it an SFT warm start kept PEFT's blank template card and the absolute path of the base it was loaded from,
which another machine cannot re-merge."""

from __future__ import annotations

from trl import SFTTrainer

from divrl.trainers.model_card import write_model_card

SFT_TRAINER = "`divrl sft` (TRL's `SFTTrainer`, LoRA): a supervised warm start for RL"


class WarmStartTrainer(SFTTrainer):
    """TRL's SFTTrainer plus divrl's model card and portable base name in every saved folder."""

    _tag_names = ["trl", "sft", "divrl"]

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """SFTTrainer's save, then the card and the portable base name (the saving process only)."""
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            write_model_card(self, output_dir or self.args.output_dir, trained_with=SFT_TRAINER, papers=[])
