#include <stdio.h>

/* Number of lines of `path`, or -1 if it cannot be read. */
long count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long lines = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        if (c == ' ') lines++;
    fclose(f);
    return lines;
}
