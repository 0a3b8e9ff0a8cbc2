"""What ``policy.activation`` and ``policy.hidden_sizes`` reach: the help says which networks they shape,
and the networks built agree with it (the critics keep their own settings)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
from torch import nn

from corral.framework.plugins import get_registry


def help_of(policy: str, name: str) -> str:
    """The help text of ``policy.<name>`` as registered."""
    config = get_registry().get("policy", policy).config
    return {f.name: f.metadata["help"] for f in dataclasses.fields(config)}[name]


def activations(module: nn.Module) -> set[type]:
    """The activation module types inside ``module``."""
    return {type(m) for m in module.modules() if isinstance(m, (nn.Tanh, nn.ReLU, nn.ELU, nn.GELU, nn.SiLU))}


@pytest.mark.parametrize("policy, name, says", [
    ("mlp", "activation", "the value network of algo=ppo, vpg and trpo is always tanh"),
    ("mlp", "hidden_sizes", "algo.vf_hidden_sizes"),
    ("tanh_gaussian", "activation", "algo.qf_activation"),
    ("tanh_gaussian", "hidden_sizes", "algo.qf_hidden_sizes"),
    ("qnet", "activation", "target network is a copy"),
    ("pearl", "activation", "Q networks are always relu"),
    ("pearl", "hidden_sizes", "algo.qf_hidden_sizes"),
    ("gru", "hidden_size", "algo.vf_hidden_sizes"),
])
def test_the_help_says_which_networks_a_policy_setting_shapes(policy: str, name: str, says: str) -> None:
    assert says in help_of(policy, name)


@pytest.mark.parametrize("algo", ["ppo", "vpg", "trpo"])
def test_mlp_activation_changes_the_policy_and_not_the_value_network(corral_build: Callable[..., Any],
                                                                     algo: str) -> None:
    run = corral_build(f"algo={algo}", "policy.activation=relu", "policy.hidden_sizes=[8]", "trainer.batch_size=200")
    assert activations(run.policy) == {nn.ReLU}
    assert activations(run.algo.value_function) == {nn.Tanh}


def test_tanh_gaussian_activation_changes_the_actor_and_not_sacs_q_networks(corral_build: Callable[..., Any]) -> None:
    run = corral_build("algo=sac", "env=pendulum", "policy=tanh_gaussian", "policy.activation=tanh",
                       "policy.hidden_sizes=[8]", "algo.qf_hidden_sizes=[8]", "trainer.batch_size=200")
    assert activations(run.policy) == {nn.Tanh}
    assert activations(run.algo.qf1) == activations(run.algo.qf2) == {nn.ReLU}


def test_pearl_activation_changes_the_actor_and_encoder_and_not_the_q_networks(
        corral_build: Callable[..., Any]) -> None:
    run = corral_build("experiment=pearl_pointnav", "policy.activation=tanh", "policy.hidden_sizes=[8]",
                       "policy.encoder_hidden_sizes=[8]", "algo.qf_hidden_sizes=[8]")
    assert activations(run.policy) == {nn.Tanh}  # the actor and the context encoder
    assert activations(run.algo.qf1) == activations(run.algo.qf2) == {nn.ReLU}
