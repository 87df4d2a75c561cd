/* _glovebox_wire, a zygote kernel's Jupyter wire in C (zygote_wire.c):
 * the module's init, which glovebox-zygote registers before Python starts.
 * Include after Python.h. */
#ifndef GLOVEBOX_ZYGOTE_WIRE_H
#define GLOVEBOX_ZYGOTE_WIRE_H

PyMODINIT_FUNC PyInit__glovebox_wire(void);

#endif
