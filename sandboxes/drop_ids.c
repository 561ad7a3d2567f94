/* arborl-drop UID GID CMD [ARG...]: become the agent, then exec CMD.
 *
 * The sandbox server (root, threaded Python) vforks and execs this to start each agent
 * command. It does what util-linux `setpriv --reuid --regid --clear-groups --inh-caps=-all`
 * does, and nothing more; written here rather than calling setpriv because setpriv is
 * dynamically linked and reads locale and /proc at start-up, which cost about 2 ms per
 * command, more than the rest of a command's round trip. Linked statically, this costs
 * about half a millisecond.
 *
 * Every step is checked, and the result is checked again before exec: all three uids and
 * gids are the agent's, no supplementary groups, no capabilities in any set (inheritable
 * and ambient included, which a server run by bwrap would otherwise pass on). Any failure
 * exits 126 without running CMD. Root (uid or gid 0) is refused as a target.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void fail(const char *what, int err) {
    fprintf(stderr, "arborl-drop: %s: %s\n", what, strerror(err));
    _exit(126);
}

static unsigned long parse_id(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v == 0 || v >= 0xffffffffUL)
        fail(what, EINVAL);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 4)
        fail("usage: arborl-drop UID GID CMD [ARG...]", EINVAL);
    uid_t uid = (uid_t)parse_id(argv[1], "uid");
    gid_t gid = (gid_t)parse_id(argv[2], "gid");

    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct caps[2];
    /* Inheritable first (while permitted still allows it); ambient follows inheritable. */
    if (syscall(SYS_capget, &hdr, caps))
        fail("capget", errno);
    caps[0].inheritable = caps[1].inheritable = 0;
    if (syscall(SYS_capset, &hdr, caps))
        fail("capset", errno);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) && errno != EINVAL)
        fail("clear ambient capabilities", errno);
    /* Without KEEPCAPS, setresuid away from 0 empties the permitted and effective sets. */
    if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0))
        fail("keepcaps", errno);
    if (setgroups(0, NULL))
        fail("setgroups", errno);
    if (setresgid(gid, gid, gid))
        fail("setresgid", errno);
    if (setresuid(uid, uid, uid))
        fail("setresuid", errno);

    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) || r != uid || e != uid || s != uid)
        fail("uids not dropped", EPERM);
    if (getresgid(&rg, &eg, &sg) || rg != gid || eg != gid || sg != gid)
        fail("gids not dropped", EPERM);
    if (getgroups(0, NULL) != 0)
        fail("groups not cleared", EPERM);
    if (syscall(SYS_capget, &hdr, caps))
        fail("capget", errno);
    for (int i = 0; i < 2; i++)
        if (caps[i].effective || caps[i].permitted || caps[i].inheritable)
            fail("capabilities not cleared", EPERM);
    for (unsigned long c = 0; c <= 63; c++) {
        int on = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0);
        if (on < 0)
            break; /* past the kernel's last capability (or no ambient support) */
        if (on)
            fail("ambient capabilities not cleared", EPERM);
    }

    execvp(argv[3], argv + 3);
    int err = errno;
    /* As setpriv and shells do: 127 for a command that is not there, 126 otherwise. */
    fprintf(stderr, "arborl-drop: %s: %s\n", argv[3], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}
