#include "config.h"
#include "wspager.h"

unsigned wsp_version_number(void)
{
	return WSP_VERSION_NUMBER;
}

const char *wsp_version_string(void)
{
	return PACKAGE_VERSION;
}
