"""The water-filling's tie tolerance, shared by the numpy code (fluid) and its compiled kernel
(fluid_kernel), which must not import each other."""

# A link whose fair share is within this relative distance of the minimum is a
# bottleneck of the same round (floating-point ties are real ties).
TIE = 1e-9
