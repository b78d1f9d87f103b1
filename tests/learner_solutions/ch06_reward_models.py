"""Second solution for chapter 06: the last real token found from the right, -log sigma as softplus."""

import torch


def pairwise_loss(chosen_values, chosen_mask, rejected_values, rejected_mask):
    # last real token = L - 1 - (index of the first 1 in the row read backwards)
    def last_reward(values, mask):
        length = mask.shape[1]
        from_right = mask.flip(dims=[1]).to(torch.int64).argmax(dim=1)  # (N,)
        return values[torch.arange(values.shape[0]), length - 1 - from_right]  # (N,)

    margin = last_reward(chosen_values, chosen_mask) - last_reward(rejected_values, rejected_mask)  # (N,)
    loss = torch.nn.functional.softplus(-margin).mean()  # -log sigma(m) = log(1 + exp(-m))
    with torch.no_grad():
        wins = torch.where(margin > 0, 1.0, torch.where(margin < 0, 0.0, 0.5))
    return loss, {"accuracy": wins.mean().item(), "margin": margin.mean().item()}
