// tileops: declaration-only stand-in; the real PTO-ISA header of this name is folded into
// <pto/pto-inst.hpp> here, so kernels that include it directly compile unchanged.
#include <pto/pto-inst.hpp>
