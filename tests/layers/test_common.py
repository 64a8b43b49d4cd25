"""The one "one of these" check (layers/common.py): options typed `Literal[...]`, every such field
of a module checked at once, one line naming the valid values."""
import pytest

from poolformers_jax.layers.attention import LinearAttention, MultiHeadAttention
from poolformers_jax.layers.common import check_choice, check_choices, literal_fields
from poolformers_jax.layers.context_pool import ContextPool2D, ContextPoolAttention
from poolformers_jax.layers.hierarchical_pool import HierarchicalPool
from poolformers_jax.layers.msac import MSAC, CrossAttentiveInput
from poolformers_jax.models.lm import CharTransformerLM
from poolformers_jax.models.ponet_mlm import PoNetMLM
from poolformers_jax.models.vit import VisionTransformer

CP = {'weights': ('learned', 'uniform', 'unnormalized', 'nonlocal'),
      'locality': ('gaussian', 'none', 'fixed_window', 'adaptive_window', 'random_sparse'),
      'predictor': ('conv', 'mlp', 'attention')}
# module, its required fields -> {field: its values}
CASES = [
    (MultiHeadAttention, {'num_heads': 2}, {
        'implementation': ('explicit', 'xla', 'cudnn', 'auto'),
        'dropout_on': ('output', 'weights')}),
    (LinearAttention, {'num_heads': 2}, {'normalizer': ('keys', 'padded_length')}),
    (ContextPoolAttention, {'num_heads': 2}, {
        **CP, 'implementation': ('explicit', 'xla', 'cudnn', 'auto'),
        'placement': ('mixer_input', 'block_output')}),
    (ContextPool2D, {}, CP),
    (HierarchicalPool, {}, {'method': ('max', 'avg', 'conv')}),
    (MSAC, {'num_heads': 2}, {'heads': ('full', 'split')}),
    (CrossAttentiveInput, {}, {'segment': ('add', 'concat', 'none')}),
    (VisionTransformer, {'num_classes': 2}, {'classifier': ('token', 'mean'),
                                              'pool_method': ('max', 'avg', 'conv'),
                                              'remat': ('none', 'full', 'dots')}),
    (CharTransformerLM, {'vocab_size': 9},
     {'positions': ('learned', 'sinusoidal', 'rotary', 'none'),
      'remat': ('none', 'full', 'dots')}),
    (PoNetMLM, {'vocab_size': 9}, {'mixer': ('ponet', 'softmax'),
                                     'positions': ('learned', 'sinusoidal', 'rotary', 'none')}),
]


@pytest.mark.parametrize('cls, required, expected', CASES, ids=[c[0].__name__ for c in CASES])
def test_literal_fields_are_the_options_and_each_fails_with_one_line(cls, required, expected):
  assert literal_fields(cls) == expected
  check_choices(cls(**required))                 # the defaults are valid
  for field, values in expected.items():
    with pytest.raises(ValueError) as error:
      check_choices(cls(**required, **{field: 'bogus'}))
    assert str(error.value) == (f"{cls.__name__}: unknown {field} 'bogus'; choose one of "
                                f'{list(values)}.')


def test_check_choice_takes_any_table():
  check_choice('X', 'pool', 'max', {'avg': 1, 'max': 2})
  with pytest.raises(ValueError,
                     match=r"^X: unknown pool 'min'; choose one of \['avg', 'max'\]\.$"):
    check_choice('X', 'pool', 'min', sorted({'max': 2, 'avg': 1}))
