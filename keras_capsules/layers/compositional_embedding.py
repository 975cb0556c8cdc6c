"""CompositionalEmbedding: word embeddings composed from a few shared codebooks."""

import warnings

import keras
import numpy as np
from keras import ops

from keras_capsules.layers._own_casting import OwnCastingLayer
from keras_capsules._validation import (
    boolean,
    check_floating_dtype,
    concrete_values,
    get_constraint,
    get_initializer,
    get_regularizer,
    positive_int,
)
from keras_capsules.ops import routing_dtype


def default_num_codewords(input_dim, num_codebooks):
    """The smallest integer ``K`` with ``K ** num_codebooks >= input_dim``.

    Computed exactly in integers (a float root such as ``60000 ** (1/8)`` can round
    to the wrong side of an integer).

    Args:
        input_dim: vocabulary size ``V`` (positive integer).
        num_codebooks: number of codebooks ``M`` (positive integer).

    Returns:
        ``K``, the number of codewords per codebook that lets ``K ** M`` distinct
        codes tell all ``V`` ids apart.
    """
    if input_dim <= 1:
        return 1
    if num_codebooks >= (input_dim - 1).bit_length():
        # 2 ** M >= V already. (Not computed: 2 ** M of M = 10**20 codebooks is an
        # integer of 10**20 bits, whose computation never ended.)
        return 2
    # here M < log2(V) + 1: the powers below are integers of about V's size
    k = max(1, int(round(input_dim ** (1.0 / num_codebooks))))
    while k > 1 and (k - 1) ** num_codebooks >= input_dim:
        k -= 1
    while k**num_codebooks < input_dim:
        k += 1
    return k


#: The most numbers a tensor can hold (its size is an int64).
MAX_WEIGHT_SIZE = 2**63 - 1


def _check_weight_size(weight, at_least=False, **dims):
    """Refuses a weight of the sizes ``dims`` (named by their arguments) that holds more
    than :data:`MAX_WEIGHT_SIZE` numbers (no backend can build it); ``at_least``: the
    weight holds at least that many numbers (other sizes are not known yet)."""
    size = 1
    for value in dims.values():
        size *= value
    if size > MAX_WEIGHT_SIZE:
        names = list(dims)
        received = ", ".join(f"{name}={value!r}" for name, value in dims.items())
        raise ValueError(
            f"CompositionalEmbedding's `{weight}` weight would hold {' * '.join(names)} = "
            f"{' * '.join(str(value) for value in dims.values())} numbers{' or more' if at_least else ''}, "
            f"more than the 2**63 - 1 that a tensor can hold: lower {', '.join(names[:-1])} or "
            f"{names[-1]}. Received: {received}"
        )


@keras.saving.register_keras_serializable(package="keras_capsules")
class CompositionalEmbedding(OwnCastingLayer):
    """Embeds ids as sums of codewords from ``M`` small codebooks (compositional coding).

    A standard embedding stores one ``D``-vector per id (``V * D`` numbers). Here the
    layer stores ``M`` codebooks of ``K`` codewords each (``codebook``
    ``[M, K, D]``) and describes every id by a code: which codeword of each codebook
    it uses. The embedding of an id is the sum over codebooks of its codewords.

    Two ways of holding the codes:

    * **learned codes** (default; Ren & Lu's compositional coding): the code of id
      ``w`` is a real-valued weight ``codes[w]`` ``[M, K]``; every codebook's
      codeword is chosen softly,
      ``e[w] = sum_m sum_k softmax_k(codes[w, m, :])[k] * codebook[m, k, :]``,
      so codes and codebooks train jointly by backpropagation.
    * **fixed codes** (Shu & Nakayama's compressed "CC" embedding, for deployment):
      the code of id ``w`` is ``M`` integers ``codes[w, m]`` in ``[0, K)`` and
      ``e[w] = sum_m codebook[m, codes[w, m], :]``. The codes are a non-trainable
      ``int32`` weight ``codes`` ``[V, M]``; only ``codebook`` trains. Pass the codes
      as the ``codes`` constructor argument (an integer array), or get a deployable
      layer from a trained learned-code layer with :meth:`to_fixed_codes` (which
      takes the argmax of every codebook's softmax, see :meth:`hard_codes`).
      ``get_config()`` records ``fixed_codes=True`` but never the code table itself
      (it would bloat the config): the table is saved with the weights, so a
      ``.keras`` file round-trips it, and ``from_config`` creates a zero table to be
      filled by the saved weights (or by ``set_weights``).

    With ``K`` the smallest integer such that ``K ** M >= V`` (the default), the
    learned form has ``V * M * K + M * K * D`` parameters instead of ``V * D``: for
    ``V = 60000, D = 64, M = 8`` (``K = 4``) 1.92M instead of 3.84M; the fixed form
    needs only ``V * M`` small integers (``M * log2(K)`` bits per id) and the codebooks.

    Ids are checked in eager calls: an id outside ``[0, input_dim)`` (NaN, or a float
    id that is not a whole number, included) raises a ``ValueError``. (Inside a
    traced function, e.g. ``model.fit`` or ``jit_compile``, the values are unknown:
    there such an id embeds as NaN, never as another id's row.) With ``mask_zero=True``
    id 0 is padding, exactly as in ``keras.layers.Embedding``: it still has an
    embedding, and the layer emits the mask ``ids != 0``. int64 ids are compared as
    int64, so an id of ``2**31`` or more is out of range too.

    Mixed precision: weights are float32; the softmax and the sum run in float32 and
    the output is cast to the compute dtype.

    Args:
        input_dim: vocabulary size ``V`` (ids lie in ``[0, V)``).
        output_dim: embedding dimension ``D``.
        num_codebooks: number of codebooks ``M``. Default 8.
        num_codewords: codewords per codebook ``K`` (at least 2 when ``V > 1``: with
            one, every id has the same embedding); None (default) for the smallest
            ``K`` with ``K ** M >= V``. Sizes whose ``codes`` (``[V, M, K]``, or
            ``[V, M]`` fixed) or ``codebook`` (``[M, K, D]``) would hold more than
            ``2**63 - 1`` numbers, which no tensor can, raise a ``ValueError``.
        mask_zero: if True, id 0 is padding and the layer returns a mask.
        codes: None (learned codes), or an integer array ``[V, M]`` with values in
            ``[0, K)``: the fixed codes (implies ``fixed_codes=True``).
        fixed_codes: True for fixed integer codes, False for learned codes; None
            (default) means True exactly when ``codes`` is given. ``fixed_codes=True``
            without ``codes`` creates a zero code table (for ``from_config``).
        codes_initializer: initializer of the learned ``codes``. Default normal with
            standard deviation 1 (distinct soft codes from the start).
        codebook_initializer: initializer of ``codebook``. Default ``"uniform"``.
        codes_regularizer, codebook_regularizer: optional regularizers.
        codes_constraint, codebook_constraint: optional constraints (``codes_regularizer``
            and ``codes_constraint`` only with learned codes: with fixed codes they
            raise a ``ValueError``).
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: integer ids of any shape ``[...]`` (a ragged tensor too, as in
            ``keras.layers.Embedding``: the output is then ragged alike).

    Returns:
        Embeddings ``[..., output_dim]``.

    Example:

    ```python
    tokens = keras.Input((None,), dtype="int32")
    emb = keras_capsules.layers.CompositionalEmbedding(60000, 64, mask_zero=True)
    x = emb(tokens)                                     # [batch, seq, 64], masked
    # ... train, then deploy with 8 integer codes per word:
    small = emb.to_fixed_codes()
    ```

    Reference:
        R. Shu, H. Nakayama, "Compressing Word Embeddings via Deep Compositional Code
        Learning", ICLR 2018; H. Ren, H. Lu, "Compositional Coding Capsule Network
        with K-Means Routing for Text Classification", 2018.
    """

    def __init__(
        self,
        input_dim,
        output_dim,
        num_codebooks=8,
        num_codewords=None,
        mask_zero=False,
        codes=None,
        fixed_codes=None,
        codes_initializer=None,
        codebook_initializer="uniform",
        codes_regularizer=None,
        codebook_regularizer=None,
        codes_constraint=None,
        codebook_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_floating_dtype(self, "It is the dtype of the embeddings; integer ids are taken as they come.")
        self.input_dim = positive_int("input_dim", input_dim)
        self.output_dim = positive_int("output_dim", output_dim)
        self.num_codebooks = positive_int("num_codebooks", num_codebooks)
        num_codewords = positive_int("num_codewords", num_codewords, allow_none=True)
        # (the code table has V * M entries in either form, K = 1 codeword at least)
        _check_weight_size("codes", True, input_dim=self.input_dim, num_codebooks=self.num_codebooks)
        if num_codewords is None:
            num_codewords = default_num_codewords(self.input_dim, self.num_codebooks)
        if num_codewords == 1 and self.input_dim > 1:
            raise ValueError(
                "`num_codewords` must be at least 2 for a vocabulary of more than one id: "
                "with one codeword per codebook every id has the same embedding. "
                f"Received: num_codewords={num_codewords}, input_dim={self.input_dim}"
            )
        self.num_codewords = num_codewords
        self.mask_zero = mask_zero = boolean("mask_zero", mask_zero)  # numpy booleans too
        if fixed_codes is None:
            fixed_codes = codes is not None
        if not isinstance(fixed_codes, (bool, np.bool_)):
            raise ValueError(
                f"`fixed_codes` must be True, False or None. Received: fixed_codes={fixed_codes!r}"
            )
        fixed_codes = bool(fixed_codes)
        # sizes that no tensor can hold, refused here rather than by build (TensorFlow's
        # "Can't convert Python sequence with out-of-range integer to Tensor")
        if not fixed_codes:
            _check_weight_size("codes", input_dim=self.input_dim, num_codebooks=self.num_codebooks,
                               num_codewords=num_codewords)
        _check_weight_size("codebook", num_codebooks=self.num_codebooks, num_codewords=num_codewords,
                           output_dim=self.output_dim)
        if codes is not None and not fixed_codes:
            raise ValueError(
                "`codes` gives fixed integer codes, which contradicts fixed_codes=False. "
                f"Received: fixed_codes={fixed_codes!r}"
            )
        self.fixed_codes = fixed_codes
        if fixed_codes:  # they act on learned codes only: accepted, they were silently ignored
            for arg, value in (("codes_regularizer", codes_regularizer), ("codes_constraint", codes_constraint)):
                if value is not None:
                    raise ValueError(
                        f"`{arg}` applies to learned codes; these codes are fixed (`codes` given or "
                        f"fixed_codes=True). Received: {arg}={value!r}"
                    )
        self._initial_codes = None if codes is None else self._validate_codes(codes)
        default_codes_initializer = keras.initializers.RandomNormal(stddev=1.0)
        self.codes_initializer = get_initializer(
            "codes_initializer", default_codes_initializer if codes_initializer is None else codes_initializer
        )
        given = keras.initializers.serialize(self.codes_initializer)
        if fixed_codes and given != keras.initializers.serialize(default_codes_initializer):
            # (it was taken, recorded in the config and never used; a warning, not a refusal
            # as for the regularizer and constraint: get_config writes the initializer of
            # every layer, and configs saved with one must load)
            warnings.warn(
                f"CompositionalEmbedding: codes_initializer={given.get('class_name', given)!r} has no "
                "effect: it needs learned codes (fixed_codes=False); fixed codes come from `codes` "
                "(zeros until assigned).",
                UserWarning,
                stacklevel=2,
            )
        self.codebook_initializer = get_initializer("codebook_initializer", codebook_initializer)
        self.codes_regularizer = get_regularizer("codes_regularizer", codes_regularizer)
        self.codebook_regularizer = get_regularizer("codebook_regularizer", codebook_regularizer)
        self.codes_constraint = get_constraint("codes_constraint", codes_constraint)
        self.codebook_constraint = get_constraint("codebook_constraint", codebook_constraint)
        self.supports_masking = mask_zero

    def _validate_codes(self, codes):
        if not isinstance(codes, (np.ndarray, list, tuple)):
            codes = ops.convert_to_numpy(codes)  # a tensor or variable
        codes = np.asarray(codes)
        expected = (self.input_dim, self.num_codebooks)
        if codes.shape != expected or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(
                f"`codes` must be an integer array of shape [input_dim, num_codebooks] = "
                f"{list(expected)}. Received: codes with shape {list(codes.shape)} and "
                f"dtype {codes.dtype}"
            )
        if codes.size and (codes.min() < 0 or codes.max() >= self.num_codewords):
            raise ValueError(
                f"`codes` values must lie in [0, num_codewords) = [0, {self.num_codewords}) "
                "(pass num_codewords for larger codes). Received: codes with values in "
                f"[{codes.min()}, {codes.max()}]"
            )
        return codes.astype("int32")

    # ------------------------------------------------------------------ weights
    def build(self, input_shape=None):
        m, k = self.num_codebooks, self.num_codewords
        if self.fixed_codes:
            self.codes = self.add_weight(
                name="codes",
                shape=(self.input_dim, m),
                dtype="int32",
                initializer="zeros",
                trainable=False,
            )
            if self._initial_codes is not None:
                self.codes.assign(self._initial_codes)
                self._initial_codes = None
        else:
            self.codes = self.add_weight(
                name="codes",
                shape=(self.input_dim, m, k),
                initializer=self.codes_initializer,
                regularizer=self.codes_regularizer,
                constraint=self.codes_constraint,
            )
        self.codebook = self.add_weight(
            name="codebook",
            shape=(m, k, self.output_dim),
            initializer=self.codebook_initializer,
            regularizer=self.codebook_regularizer,
            constraint=self.codebook_constraint,
        )
        self.built = True

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)

    def compute_output_spec(self, inputs):
        self._check_input(inputs)
        # ragged alike, as keras.layers.Embedding's (the eager output was ragged, the
        # symbolic one was not)
        return keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype,
            ragged=bool(getattr(inputs, "ragged", False)),
        )

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    # ------------------------------------------------------------------ call
    def _check_ids(self, ids):
        values = concrete_values(ids)
        if values is None or not values.size:
            return
        # Written so that NaN is out of range too; float ids must be whole numbers.
        ok = (values >= 0) & (values < self.input_dim)
        if np.issubdtype(values.dtype, np.floating):
            ok &= values == np.floor(values)
        if not ok.all():
            raise ValueError(
                f"CompositionalEmbedding ids must be integers in [0, input_dim) = "
                f"[0, {self.input_dim}). Received: ids with invalid values "
                f"{np.unique(values[~ok])[:10].tolist()}"
            )

    def _check_input(self, inputs):
        if isinstance(inputs, (list, tuple)):
            raise ValueError(
                "CompositionalEmbedding expects one tensor of integer ids of any shape. "
                f"Received: a list of {len(inputs)}"
            )
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if dtype == "string":
            raise ValueError(
                "CompositionalEmbedding expects integer ids in [0, input_dim) (map strings "
                f"to ids first, e.g. with keras.layers.StringLookup). Received: ids of dtype {dtype}"
            )

    def call(self, inputs):
        self._check_input(inputs)
        if hasattr(inputs, "flat_values") and hasattr(inputs, "with_flat_values"):
            # Ragged ids (as keras.layers.Embedding takes them): embed the values.
            return inputs.with_flat_values(self.call(inputs.flat_values))
        self._check_ids(inputs)
        # int64 ids stay int64, as in keras.layers.Embedding (ids of 2**31 and more wrapped
        # to other, possibly valid, rows where the check above does not run); floats
        # holding ids are accepted, as in Embedding.
        wide = keras.backend.standardize_dtype(inputs.dtype) in ("int64", "uint32", "uint64")
        # Where the check above cannot run (traced calls), an id out of range embeds as NaN:
        # the backends' lookups took it as another row (-1 as id V-1; under XLA every one).
        if keras.backend.is_float_dtype(inputs.dtype):  # whole numbers in range (NaN is not)
            valid = ops.logical_and(ops.equal(inputs, ops.floor(inputs)), ops.logical_and(
                ops.greater_equal(inputs, 0), ops.less(inputs, self.input_dim)))
            ids = ops.cast(ops.where(valid, inputs, ops.zeros_like(inputs)), "int32")
        else:
            ids = ops.cast(inputs, "int64" if wide else "int32")
            valid = ops.logical_and(ops.greater_equal(ids, 0), ops.less(ids, self.input_dim))
            ids = ops.where(valid, ids, ops.zeros_like(ids))
        dtype = routing_dtype(self.compute_dtype)
        codebook = ops.cast(self.codebook, dtype)
        if self.fixed_codes:
            # Row m*K + codes[w, m] of the flattened codebook is codeword codes[w, m] of m.
            offsets = ops.arange(self.num_codebooks, dtype="int32") * self.num_codewords
            rows = ops.take(self.codes, ids, axis=0) + offsets  # [..., M]
            flat = ops.reshape(codebook, (self.num_codebooks * self.num_codewords, self.output_dim))
            out = ops.sum(ops.take(flat, rows, axis=0), axis=-2)
        else:
            weights = ops.cast(ops.take(self.codes, ids, axis=0), dtype)
            if self.num_codewords == 1:  # one id, one codeword (Keras warns on a softmax over one)
                weights = ops.ones_like(weights)
            else:
                weights = ops.softmax(weights, axis=-1)
            # "..." for the id axes: ids of any rank (named letters ran into "d").
            out = ops.einsum("...mk,mkd->...d", weights, codebook)
        out = ops.where(ops.expand_dims(valid, -1), out, ops.cast(float("nan"), out.dtype))
        return ops.cast(out, self.compute_dtype)

    # ------------------------------------------------------------------ export
    def hard_codes(self):
        """The integer codes ``[input_dim, num_codebooks]`` (numpy ``int32``).

        For learned codes, the argmax of every codebook's softmax (the codeword each
        id leans to most); for fixed codes, the code table itself.
        """
        if not self.built:
            raise ValueError("hard_codes() needs a built layer. Received: an unbuilt layer")
        codes = ops.convert_to_numpy(self.codes)
        if self.fixed_codes:
            return codes.astype("int32")
        return np.argmax(codes, axis=-1).astype("int32")

    def to_fixed_codes(self, **kwargs):
        """A fixed-code copy of this layer for deployment.

        The new layer has the same vocabulary, dimensions, mask setting and
        ``codebook`` values (and codebook regularizer and constraint), and the codes
        of :meth:`hard_codes`; the learned codes' ``codes_regularizer`` and
        ``codes_constraint`` are dropped, as fixed codes do not train. Its embeddings equal
        this layer's exactly when every learned softmax is one-hot; otherwise they are
        the hard (argmax) approximation of them.

        Args:
            **kwargs: base layer arguments for the new layer (e.g. ``name``).

        Returns:
            A built ``CompositionalEmbedding`` with ``fixed_codes=True``.
        """
        taken = sorted({"codes", "fixed_codes"} & set(kwargs))
        if taken:
            raise ValueError(
                "to_fixed_codes() takes the codes from this layer (hard_codes()) and always "
                f"makes fixed_codes=True; pass base layer arguments only. Received: {taken[0]}="
                f"{'an array' if taken[0] == 'codes' else repr(kwargs[taken[0]])}"
            )
        codes = self.hard_codes()
        config = self.get_config()
        # The learned codes' initializer, regularizer and constraint do not apply to fixed
        # codes (the constructor warns of the first, refuses the others), so they are not
        # carried over.
        for key in ("name", "fixed_codes", "trainable", "codes_initializer", "codes_regularizer", "codes_constraint"):
            config.pop(key, None)
        config.update(kwargs)
        layer = type(self)(**config, codes=codes, fixed_codes=True)
        layer.build()
        layer.codebook.assign(ops.convert_to_numpy(self.codebook))
        return layer

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "input_dim": self.input_dim,
                "output_dim": self.output_dim,
                "num_codebooks": self.num_codebooks,
                "num_codewords": self.num_codewords,
                "mask_zero": self.mask_zero,
                "fixed_codes": self.fixed_codes,
                "codes_initializer": keras.initializers.serialize(self.codes_initializer),
                "codebook_initializer": keras.initializers.serialize(self.codebook_initializer),
                "codes_regularizer": keras.regularizers.serialize(self.codes_regularizer),
                "codebook_regularizer": keras.regularizers.serialize(self.codebook_regularizer),
                "codes_constraint": keras.constraints.serialize(self.codes_constraint),
                "codebook_constraint": keras.constraints.serialize(self.codebook_constraint),
            }
        )
        return config
