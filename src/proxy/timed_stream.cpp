#include "tokengate/proxy/timed_stream.hpp"

namespace tokengate::proxy {

TimedStream::TimedStream(net::ip::tcp::socket socket)
    : socket_(std::move(socket)), dog_(std::make_shared<Watchdog>(socket_.get_executor())) {
    dog_->socket = &socket_;
}

TimedStream::~TimedStream() {
    dog_->socket = nullptr;
    dog_->timer.cancel();
}

void TimedStream::expires_after(std::chrono::nanoseconds timeout) {
    dog_->expired = false;
    dog_->deadline = clock::now() + timeout;
    // A later deadline waits for the timer to find it; only an earlier one moves the timer.
    if (dog_->deadline < dog_->armed_for) arm(dog_);
}

void TimedStream::expires_never() {
    dog_->expired = false;
    dog_->deadline = clock::time_point::max();
}

void TimedStream::close_socket() {
    beast::error_code ignored;
    socket_.close(ignored);
}

void TimedStream::arm(const std::shared_ptr<Watchdog>& dog) {
    dog->armed_for = dog->deadline;
    dog->timer.expires_at(dog->deadline);  // a wait already pending ends as aborted, and is ignored
    dog->timer.async_wait(
        [dog, generation = ++dog->generation](const beast::error_code&) { on_timer(dog, generation); });
}

void TimedStream::on_timer(const std::shared_ptr<Watchdog>& dog, std::uint64_t generation) {
    if (generation != dog->generation || !dog->socket) return;  // replaced by a later wait, or the stream is gone
    dog->armed_for = clock::time_point::max();
    if (dog->deadline == clock::time_point::max()) return;
    if (clock::now() < dog->deadline) return arm(dog);
    dog->expired = true;
    if (dog->pending > 0) {  // pending operations end now, as timeout (Completion)
        beast::error_code ignored;
        dog->socket->close(ignored);
    }
}

}  // namespace tokengate::proxy
