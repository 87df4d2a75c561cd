/* What config.c (the option table and its loading) and config_check.c
 * (the checks once every option is read) share. Nothing else includes
 * this. */
#ifndef GLOVEBOX_CONFIG_PRIVATE_H
#define GLOVEBOX_CONFIG_PRIVATE_H

#include "gateway/core/config.h"

/* Checks and completes cfg (the listen address split, the base URL
 * normalised, the token read or made up): 0, or -EINVAL after saying why
 * on stderr. */
int config_validate(struct config *cfg);

/* Sets the option name to value as the command line would: 0, or
 * -EINVAL (said on stderr) for a bad value or an unknown name. */
int config_set(struct config *cfg, const char *name, const char *value);

#endif
