/* Human sizes: "512M", "1.5GiB" in, "1.46 GiB" out. Binary units throughout. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "wspager.h"

int wsp_parse_size(const char *text, uint64_t *out)
{
	if (!text || !out || !*text || isspace((unsigned char)*text) || *text == '-')
		return -EINVAL;
	errno = 0;
	char *end;
	double v = strtod(text, &end);
	if (end == text || errno || !(v >= 0))
		return -EINVAL;
	double mul = 1;
	switch (toupper((unsigned char)*end)) {
	case 'K': mul = 1024.0; end++; break;
	case 'M': mul = 1048576.0; end++; break;
	case 'G': mul = 1073741824.0; end++; break;
	case 'T': mul = 1099511627776.0; end++; break;
	case '\0': break;
	case 'B': break;
	default: return -EINVAL;
	}
	if (mul > 1 && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	double bytes = v * mul;
	if (bytes >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)llround(bytes);
	return 0;
}

char *wsp_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	if (!buf || !len)
		return buf;
	double v = (double)bytes;
	unsigned u = 0;
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, units[u]);
	return buf;
}
