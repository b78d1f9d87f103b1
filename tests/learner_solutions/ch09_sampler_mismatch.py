"""Second solutions for chapter 09: a sequence's weight as torch.prod of the token ratios; IcePop's ratio as
exp(old) / exp(behaviour). Both are correct and differ from the package in the last bits."""

import torch


def my_truncated_weights(old_logprobs, behaviour_logprobs, mask, level="token", threshold=2.0):
    rho = torch.where(mask, torch.exp(old_logprobs - behaviour_logprobs), 1.0)  # 1 on padding: neutral in a product
    if level == "sequence":
        rho = torch.prod(rho, dim=1, keepdim=True).expand_as(rho)
    return torch.where(mask, torch.clamp(rho, max=threshold), 0.0)


def my_icepop_weights(old_logprobs, behaviour_logprobs, mask, lower=0.5, upper=5.0):
    old = torch.where(mask, old_logprobs, 0.0)
    behaviour = torch.where(mask, behaviour_logprobs, 0.0)
    rho = torch.exp(old) / torch.exp(behaviour)
    inside = (lower <= rho) & (rho <= upper) & mask
    return torch.where(inside, rho, torch.zeros_like(rho))
