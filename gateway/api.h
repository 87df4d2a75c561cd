/* The REST API: routes a complete request to its handler, which answers
 * through http_reply_* now or later. */
#ifndef GLOVEBOX_API_H
#define GLOVEBOX_API_H

#include "gateway/http.h"

void api_handle(struct http_request *r);

#endif
