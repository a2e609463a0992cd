// Releasing the GIL around a blocking call, safely at interpreter exit.
//
// CPython before 3.14 ends a thread that asks for the GIL back while the
// interpreter is finalizing (a daemon thread still in a call when the main
// thread returns) with pthread_exit(). Its forced unwinding through C++ frames
// reaches noexcept frames and calls std::terminate: the process aborts
// ("terminate called without an active exception", status 134) after it
// finished its work. ReleaseGil parks such a thread instead; the exiting
// process takes it along, which is what CPython 3.14 itself does.
// The thread that finalizes (the main thread) takes the GIL back as usual.
#pragma once

#include <Python.h>
#include <pythread.h>
#include <unistd.h>

#include <atomic>

namespace dstp_gil {

// The main thread's ident, recorded at module initialisation (init_main_thread).
inline std::atomic<unsigned long>& main_thread() {
    static std::atomic<unsigned long> ident{0};
    return ident;
}

// Call once, with the GIL held, from the module's init function.
inline void init_main_thread() {
    PyObject* threading = PyImport_ImportModule("threading");
    if (threading == nullptr) {
        PyErr_Clear();
        return;
    }
    PyObject* main = PyObject_CallMethod(threading, "main_thread", nullptr);
    PyObject* ident = main ? PyObject_GetAttrString(main, "ident") : nullptr;
    if (ident != nullptr) main_thread().store(PyLong_AsUnsignedLong(ident));
    if (PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_DECREF(threading);
}

inline bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
}

class ReleaseGil {
  public:
    ReleaseGil() : state_(PyEval_SaveThread()) {}
    ~ReleaseGil() {
        if (finalizing() && PyThread_get_thread_ident() != main_thread().load()) {
            for (;;) pause();  // never returns: the process is exiting
        }
        PyEval_RestoreThread(state_);
    }
    ReleaseGil(const ReleaseGil&) = delete;
    ReleaseGil& operator=(const ReleaseGil&) = delete;

  private:
    PyThreadState* state_;
};

}  // namespace dstp_gil
