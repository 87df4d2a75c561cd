/* The gateway's one route table (routes.c): every HTTP route, its method,
 * path pattern, who may call it and whether its body is read first, and
 * the WebSocket upgrades and relayed connections, each handed to the
 * family that serves it. Only routes.c and main.c know the families. */
#ifndef GLOVEBOX_ROUTES_H
#define GLOVEBOX_ROUTES_H

#include "gateway/core/server.h"

/* Gives the HTTP server its router (core/http.h), and returns what the
 * server hands upgrades and connection ends to (core/server.h). */
const struct server_sockets *routes_init(void);

#endif
