// Host-callable launchers of the CUDA kernels (one op per .cu file). Plain C++: no CUDA
// headers here, so engine/ can include it; streams are passed as opaque pointers.
#pragma once

namespace pagoda::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device.
int device_count();

}  // namespace pagoda::cuda
