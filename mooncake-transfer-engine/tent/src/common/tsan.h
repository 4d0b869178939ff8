/* ThreadSanitizer and the bytes that cross processes.
 *
 * A transfer's bytes are copied between user memory and a socket by the
 * kernel (send, recv) or between mappings shared with another process; the
 * next user of those bytes learns that they are complete from a later
 * message (an answer, a batch's status), often from another process and
 * through the kernel, an order TSan cannot see.  To TSan every such copy
 * then looks like a race with the previous one, and a suppression does not
 * help: each racing word is still reported, symbolised and matched, which
 * under load stalls the copying thread for seconds.  So the copies of user
 * memory are hidden from TSan, between TENT_USER_IO_BEGIN() and
 * TENT_USER_IO_END() (the same thread, nothing else in between that TSan
 * should see).  Without TSan both are no-ops. */
#ifndef TENT_COMMON_TSAN_H
#define TENT_COMMON_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define TENT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TENT_TSAN 1
#endif
#endif

#ifdef TENT_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define TENT_USER_IO_BEGIN()                                                   \
    do {                                                                       \
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);                          \
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);                         \
    } while (0)
#define TENT_USER_IO_END()                                                     \
    do {                                                                       \
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);                           \
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);                            \
    } while (0)
#else
#define TENT_USER_IO_BEGIN() ((void)0)
#define TENT_USER_IO_END()   ((void)0)
#endif

#endif
