#include "config.h"
#include "wspager.h"

/* The header a program compiles against and the version configure.ac
 * builds must be the same. */
_Static_assert(WSP_VERSION_NUMBER == WSP_CONFIGURED_VERSION_NUMBER,
	       "include/wspager.h and configure.ac disagree on the version");

unsigned wsp_version_number(void)
{
	return WSP_VERSION_NUMBER;
}

const char *wsp_version_string(void)
{
	return PACKAGE_VERSION;
}
