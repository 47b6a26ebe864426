/* Put first on the include path of test_hostonly: a public header that pulls in OpenCL
 * where it should not stops the build here. */
#error "a host-only relcl header (relcl_status.h, relcl_checkpoint.h, relcl_data.h) included CL/cl.h"
