#include "autoconf.h"

#include "kernel-host/loopback.h"

#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int loopback_up(void)
{
        struct ifreq ifr;
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        int rc;

        if (fd < 0)
                return -1;
        memset(&ifr, 0, sizeof(ifr));
        memcpy(ifr.ifr_name, "lo", 3);
        rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
        if (rc == 0) {
                ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
                rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
        }
        close(fd);
        return rc;
}
