#include <stdio.h>

long count_lines(const char *path);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: wc-lines FILE\n");
        return 2;
    }
    long n = count_lines(argv[1]);
    if (n < 0) {
        perror(argv[1]);
        return 1;
    }
    printf("%ld\n", n);
    return 0;
}
