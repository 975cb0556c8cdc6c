# The backend-neutral test tools' torch adaptations (tensors that autograd tracks read by
# numpy; numpy operands of tensor arithmetic) take effect when tests.backends is imported.
# Imported here, every layer test gets them also when its own file does not import the
# tools and runs alone (test_speed_equivalence.py on torch: "Can't call numpy() on Tensor
# that requires grad").
from tests import backends  # noqa: F401
