"""`ProjectedGRU`: Keras' GRU, trained faster on CPUs by a written-out TensorFlow loop.

Profiled on the CCCapsNet classifier (2-core CPU, one intra-op thread): the two
bidirectional GRU layers take about nine tenths of a training step, and most of that
is the backward pass TensorFlow derives, op by op, from the per-step loop. This
module computes Keras' GRU (``reset_after=True``, tanh and sigmoid) with

- the input projection of every step as one product over the whole sequence,
- a backward pass written out (``tf.custom_gradient``): one reverse loop that carries
  only the state's gradient, and the recurrent kernel's gradient as one product over
  all steps after it.

It is TensorFlow code, so it lives with the TensorFlow application, not in
``keras_capsules.layers`` (which uses ``keras.ops`` only).
"""

import keras
import tensorflow as tf


def _forward(projected, mask, h0, kernel, bias_h, units):
    """The recurrence over time-major `projected` `[steps, batch, 3 units]`.

    `mask` `[steps, batch, 1]` (bool): where False the state is carried over.
    Returns the states after every step and what the backward sweep needs.
    """
    steps = tf.shape(projected)[0]
    inputs = tf.TensorArray(projected.dtype, size=steps).unstack(projected)
    masks = tf.TensorArray(tf.bool, size=steps).unstack(mask)
    names = ("state", "gates", "candidate", "recurrent_candidate")
    written = tuple(tf.TensorArray(projected.dtype, size=steps) for _ in names)

    def body(t, h, *arrays):
        x_t = inputs.read(t)
        inner = tf.matmul(h, kernel)
        zr = tf.sigmoid(x_t[:, : 2 * units] + inner[:, : 2 * units])
        z, r = zr[:, :units], zr[:, units:]
        hr = inner[:, 2 * units :] + bias_h
        hh = tf.tanh(x_t[:, 2 * units :] + r * hr)
        h_new = tf.where(masks.read(t), hh + z * (h - hh), h)  # z h + (1 - z) hh
        values = (h_new, zr, hh, hr)
        return (t + 1, h_new) + tuple(a.write(t, v) for a, v in zip(arrays, values))

    out = tf.while_loop(lambda t, *_: t < steps, body, (0, h0) + written)
    return tuple(a.stack() for a in out[2:])


def _backward(d_states, mask, h0, kernel, states, zr, hh, hr, units):
    """The reverse sweep: gradients for `projected`, `h0`, `kernel` and `bias_h`."""
    steps = tf.shape(d_states)[0]
    previous = tf.concat([h0[None], states[:-1]], axis=0)
    reads = tuple(
        tf.TensorArray(v.dtype, size=steps).unstack(v) for v in (d_states, mask, previous, zr, hh, hr)
    )
    d_inputs = tf.TensorArray(d_states.dtype, size=steps)
    d_inners = tf.TensorArray(d_states.dtype, size=steps)
    kernel_t = tf.transpose(kernel)

    def body(t, g, d_in, d_inner_arr):
        d_out, m_t, h, zr_t, hh_t, hr_t = (a.read(t) for a in reads)
        g = g + d_out  # the gradient of the state after step t
        d_new = tf.where(m_t, g, tf.zeros_like(g))
        z, r = zr_t[:, :units], zr_t[:, units:]
        d_cand = d_new * (1.0 - z) * (1.0 - hh_t * hh_t)  # before the tanh
        d_zr = tf.concat([d_new * (h - hh_t), d_cand * hr_t], axis=1) * zr_t * (1.0 - zr_t)
        d_inner = tf.concat([d_zr, d_cand * r], axis=1)
        g_prev = d_new * z + tf.matmul(d_inner, kernel_t) + tf.where(m_t, tf.zeros_like(g), g)
        return (
            t - 1,
            g_prev,
            d_in.write(t, tf.concat([d_zr, d_cand], axis=1)),
            d_inner_arr.write(t, d_inner),
        )

    _, d_h0, d_in, d_inner = tf.while_loop(
        lambda t, *_: t >= 0, body, (steps - 1, tf.zeros_like(h0), d_inputs, d_inners)
    )
    d_inner = d_inner.stack()
    flat_inner = tf.reshape(d_inner, (-1, 3 * units))
    d_kernel = tf.matmul(tf.reshape(previous, (-1, units)), flat_inner, transpose_a=True)
    d_bias_h = tf.reduce_sum(flat_inner[:, 2 * units :], axis=0)
    return d_in.stack(), d_h0, d_kernel, d_bias_h


def gru_states(projected, mask, h0, kernel, bias_h):
    """States of a GRU after every step, time-major, with a written-out gradient.

    Args:
        projected: `[steps, batch, 3 units]`: inputs times the input kernel, plus the
            input bias and the recurrent bias of the update and reset gates.
        mask: `[steps, batch, 1]` bool; False carries the state over.
        h0: `[batch, units]` initial state.
        kernel: `[units, 3 units]` recurrent kernel (gates z, r, candidate).
        bias_h: `[units]` recurrent bias of the candidate (inside the reset gate).

    Returns:
        `[steps, batch, units]`.
    """
    units = kernel.shape[0]

    @tf.custom_gradient
    def run(projected, h0, kernel, bias_h):
        states, zr, hh, hr = _forward(projected, mask, h0, kernel, bias_h, units)

        def grad(d_states):
            return _backward(d_states, mask, h0, kernel, states, zr, hh, hr, units)

        return states, grad

    return run(projected, h0, kernel, bias_h)


class _ProjectOnceLoop(keras.layers.RNN):
    """Replaces `RNN.inner_loop` under `GRU`: the loop GRU falls back to without cuDNN.

    `ProjectedGRU` lists this class after `keras.layers.GRU` in its bases, so that the
    method resolution order is ProjectedGRU -> GRU -> _ProjectOnceLoop -> RNN. GRU's
    own `inner_loop` keeps deciding whether cuDNN can run; only the generic fallback
    it then calls with `super()` is this one.
    """

    def _written_out(self, training):
        cell = self.cell
        return (
            keras.backend.backend() == "tensorflow"
            and cell.implementation == 2
            and cell.reset_after
            and cell.use_bias
            and cell.activation is keras.activations.tanh
            and cell.recurrent_activation is keras.activations.sigmoid
            and not (training and cell.recurrent_dropout)
            and not self.unroll
        )

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if not self._written_out(training):
            return super().inner_loop(sequences, initial_state, mask, training=training)
        cell = self.cell
        units = cell.units
        if isinstance(initial_state, (list, tuple)):
            initial_state = initial_state[0]
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        if training and cell.dropout:
            # The same input mask at every step, as the cell applies it.
            dp_mask = cell.get_dropout_mask(sequences[:, 0, :])
            sequences = sequences * tf.expand_dims(dp_mask, axis=1)
        dtype = sequences.dtype
        kernel = tf.cast(cell.kernel, dtype)
        input_bias = tf.cast(cell.bias[0], dtype)
        recurrent_bias = tf.cast(cell.bias[1], dtype)
        # The gates' recurrent bias joins the input bias outside the loop; the
        # candidate's stays inside, where the reset gate multiplies it.
        bias = input_bias + tf.concat([recurrent_bias[: 2 * units], tf.zeros((units,), dtype)], 0)
        projected = tf.einsum("btd,dk->tbk", sequences, kernel) + bias  # one product
        if mask is None:
            step_mask = tf.ones(tf.shape(projected)[:2], tf.bool)
        else:
            step_mask = tf.transpose(tf.cast(mask, tf.bool))
        if self.go_backwards:
            projected = tf.reverse(projected, [0])
            step_mask = tf.reverse(step_mask, [0])
        states = gru_states(
            projected,
            step_mask[:, :, None],
            tf.cast(initial_state, dtype),
            tf.convert_to_tensor(tf.cast(cell.recurrent_kernel, dtype)),
            recurrent_bias[2 * units :],
        )
        last_state = states[-1]
        # Outputs as Keras' loop gives them: a masked step repeats the previous
        # output, which is the state once any step has been taken and zeros before;
        # with `zero_output_for_mask`, zeros.
        if self.zero_output_for_mask:
            keep = step_mask
        else:
            keep = tf.cumsum(tf.cast(step_mask, tf.int32), axis=0) > 0
        outputs = tf.where(keep[:, :, None], states, tf.zeros_like(states))
        last_output = outputs[-1]
        if self.return_sequences:
            outputs = tf.transpose(outputs, [1, 0, 2])
        else:
            outputs = last_output[:, None, :]
        return last_output, outputs, [last_state]


@keras.saving.register_keras_serializable(package="applications")
class ProjectedGRU(keras.layers.GRU, _ProjectOnceLoop):
    """`keras.layers.GRU`, faster to train where cuDNN is not used (on CPUs).

    Same function, arguments, weights and weight layout as Keras' GRU, so weights move
    freely between the two. The written-out path (see the module docstring) covers
    Keras' default GRU (tanh, sigmoid, `reset_after=True`, a bias, `implementation=2`)
    with input dropout, masks, `go_backwards` and initial states, on the TensorFlow
    backend. Where Keras would use cuDNN it still does; other settings (recurrent
    dropout in training, `unroll`, other activations) run Keras' own loop.

    Args:
        units, **kwargs: as `keras.layers.GRU`.

    Call arguments:
        As `keras.layers.GRU`: `sequences` `[batch, steps, features]`, `initial_state`,
        `mask` `[batch, steps]`, `training`.

    Returns:
        As `keras.layers.GRU`.

    Example:

    ```python
    x = keras.random.normal((4, 20, 8))
    y = ProjectedGRU(16, return_sequences=True)(x)  # [4, 20, 16]
    ```

    Reference:
        Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder for
        Statistical Machine Translation", 2014 (the GRU).
    """
